// Stand-in for the Objective-C base declarations that <Foundation/Foundation.h>
// pulls in from <objc/objc.h>, <objc/NSObject.h> and <Foundation/NSObjCRuntime.h>.
#pragma once

#include <os/availability.h>

// NSObjCRuntime.h (LP64): typedef long NSInteger; typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef unsigned long NSUInteger;

// objc/objc.h (arm64, OBJC_BOOL_IS_BOOL): typedef bool BOOL;
typedef bool BOOL;

// objc/objc.h: #define nil __DARWIN_NULL  (a null pointer constant)
#define nil nullptr

#pragma clang assume_nonnull begin

// objc/NSObject.h: @protocol NSObject
@protocol NSObject
@end

// objc/NSObject.h: OBJC_ROOT_CLASS @interface NSObject <NSObject>
__attribute__((objc_root_class))
@interface NSObject <NSObject>
// objc/NSObject.h: + (instancetype)alloc;
+ (instancetype)alloc;
// objc/NSObject.h: - (instancetype)init;
- (instancetype)init;
@end

#pragma clang assume_nonnull end
