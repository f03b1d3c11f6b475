// Stand-in for <dispatch/dispatch.h> (libdispatch, macOS SDK): only what the
// MPS backend and torch's ATen/mps/MPSStream.h use. Under ARC, dispatch
// objects are Objective-C objects (OS_OBJECT_USE_OBJC), as declared here.
#pragma once

#import <Foundation/NSObjectBase.h>

#pragma clang assume_nonnull begin

// object.h: OS_OBJECT_DECL_CLASS(dispatch_object) -> @protocol OS_dispatch_object <NSObject>
@protocol OS_dispatch_object <NSObject>
@end

// queue.h: DISPATCH_DECL(dispatch_queue) -> @protocol OS_dispatch_queue <OS_dispatch_object>
@protocol OS_dispatch_queue <OS_dispatch_object>
@end

// queue.h: typedef NSObject<OS_dispatch_queue> *dispatch_queue_t (via DISPATCH_DECL)
typedef NSObject<OS_dispatch_queue>* dispatch_queue_t;

// block.h: typedef void (^dispatch_block_t)(void);
typedef void (^dispatch_block_t)(void);

// queue.h: void dispatch_sync(dispatch_queue_t queue, DISPATCH_NOESCAPE dispatch_block_t block);
extern "C" void dispatch_sync(dispatch_queue_t queue, __attribute__((__noescape__)) dispatch_block_t block);

#pragma clang assume_nonnull end
