// std::index_sequence without <utility>, whose parse (std::pair, <compare>)
// took about 10 ms of a 150 ms kernel compile: a kernel compiled without the
// precompiled prelude (the first of a new cache) parses every header the
// prelude includes.
#pragma once

#include <cstddef>

namespace metal::detail {
template <class T, T... I>
struct integer_sequence {};
template <std::size_t... I>
using index_sequence = integer_sequence<std::size_t, I...>;
template <std::size_t N>
using make_index_sequence = __make_integer_seq<integer_sequence, std::size_t, N>;
}  // namespace metal::detail
