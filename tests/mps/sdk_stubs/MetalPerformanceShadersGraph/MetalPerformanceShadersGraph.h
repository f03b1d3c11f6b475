// Stand-in for <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
// (macOS SDK): only the classes torch's ATen/mps/MPSStream.h names.
#pragma once

#import <Foundation/Foundation.h>

#pragma clang assume_nonnull begin

// MPSGraphCore.h: @interface MPSGraphObject : NSObject
@interface MPSGraphObject : NSObject
@end

// MPSGraph.h: @interface MPSGraph : MPSGraphObject
@interface MPSGraph : MPSGraphObject
@end

// MPSGraph.h: @interface MPSGraphExecutionDescriptor : MPSGraphObject
@interface MPSGraphExecutionDescriptor : MPSGraphObject
@end

// MPSGraph.h: @interface MPSGraphCompilationDescriptor : MPSGraphObject <NSCopying>
@interface MPSGraphCompilationDescriptor : MPSGraphObject
@end

#pragma clang assume_nonnull end
