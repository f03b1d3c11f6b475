// Stand-in for <MetalPerformanceShaders/MetalPerformanceShaders.h> (macOS SDK):
// only the class torch's ATen/mps/MPSStream.h names.
#pragma once

#import <Metal/Metal.h>

#pragma clang assume_nonnull begin

// MPSCore/MPSCommandBuffer.h: @interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
@end

#pragma clang assume_nonnull end
