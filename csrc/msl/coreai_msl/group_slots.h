// The slots of the group-loop forms (csrc/cpu/group_form.h): a variable that
// lives from one loop over threads (CPU) or steps (CUDA's steps form) into a
// later one is kept in an array with one element per thread or step.
#ifndef COREAI_MSL_GROUP_SLOTS_H
#define COREAI_MSL_GROUP_SLOTS_H

#include <type_traits>

namespace coreai::group {

// What a slot holds for a variable declared `auto x = e;`.
template <class T>
using slot_t = std::remove_cv_t<std::remove_reference_t<T>>;

// Stores a declaration's initial value into its slot (arrays included).
template <class T, class U>
[[gnu::always_inline]] inline void store(T& slot, const U& value) {
  if constexpr (std::is_array_v<T>) {
    static_assert(sizeof(T) == sizeof(U), "a slot holds the declared array");
    __builtin_memcpy(&slot, &value, sizeof(T));
  } else {
    slot = value;
  }
}

}  // namespace coreai::group

#endif  // COREAI_MSL_GROUP_SLOTS_H
