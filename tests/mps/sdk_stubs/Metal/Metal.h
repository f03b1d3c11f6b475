// Stand-in for <Metal/Metal.h> (macOS 26 SDK): only what the MPS backend and
// torch's ATen/mps headers use. Each declaration names the Metal header it
// mirrors and its declaration there, and carries the SDK's availability
// (API_AVAILABLE) where the backend's use depends on it: a use of an API newer
// than the deployment target outside an @available check fails the compile.
#pragma once

#import <Foundation/Foundation.h>

#pragma clang assume_nonnull begin

// ---- MTLTypes.h ----

// MTLTypes.h: typedef struct { NSUInteger width, height, depth; } MTLSize;
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;

// MTLTypes.h: MTL_INLINE MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth)
inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

// ---- MTLResource.h / MTLBuffer.h ----

// MTLResource.h: @protocol MTLResource <MTLAllocation>  (MTLAllocation: <NSObject>)
@protocol MTLResource <NSObject>
@end

// MTLBuffer.h: @protocol MTLBuffer <MTLResource>
@protocol MTLBuffer <MTLResource>
@end

// MTLResource.h: typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) { ...
//   MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift, ... }
// (MTLStorageModeShared = 0, so the value is 0)
typedef enum MTLResourceOptions : NSUInteger {
  MTLResourceStorageModeShared = 0,
} MTLResourceOptions;

// ---- MTLLibrary.h ----

// MTLLibrary.h: API_AVAILABLE(macos(10.11), ios(8.0)) MTL_EXTERN NSErrorDomain const MTLLibraryErrorDomain;
extern "C" NSErrorDomain const MTLLibraryErrorDomain API_AVAILABLE(macos(10.11), ios(8.0));

// MTLLibrary.h: typedef NS_ENUM(NSUInteger, MTLLibraryError) { MTLLibraryErrorUnsupported = 1,
//   MTLLibraryErrorInternal = 2, MTLLibraryErrorCompileFailure = 3, MTLLibraryErrorCompileWarning = 4,
//   MTLLibraryErrorFunctionNotFound = 5, MTLLibraryErrorFileNotFound = 6 } API_AVAILABLE(macos(10.11), ios(8.0));
typedef enum MTLLibraryError : NSUInteger MTLLibraryError;
enum MTLLibraryError : NSUInteger {
  MTLLibraryErrorUnsupported = 1,
  MTLLibraryErrorInternal = 2,
  MTLLibraryErrorCompileFailure = 3,
  MTLLibraryErrorCompileWarning = 4,
  MTLLibraryErrorFunctionNotFound = 5,
  MTLLibraryErrorFileNotFound = 6,
} API_AVAILABLE(macos(10.11), ios(8.0));

// MTLLibrary.h: @protocol MTLFunction <NSObject>
@protocol MTLFunction <NSObject>
@end

// MTLLibrary.h: @protocol MTLLibrary <NSObject>
@protocol MTLLibrary <NSObject>
// MTLLibrary.h: - (nullable id <MTLFunction>) newFunctionWithName:(NSString *)functionName;
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end

// MTLLibrary.h: typedef NS_ENUM(NSUInteger, MTLLanguageVersion) { ...
//   MTLLanguageVersion4_0 API_AVAILABLE(macos(26.0), ios(26.0)) = (4 << 16) + 0, ... } API_AVAILABLE(macos(10.11), ios(9.0));
// (the backend spells 4.0 as its value, so that it builds with the macOS 15 SDK)
typedef enum MTLLanguageVersion : NSUInteger MTLLanguageVersion;
enum MTLLanguageVersion : NSUInteger {
  MTLLanguageVersion4_0 API_AVAILABLE(macos(26.0), ios(26.0)) = (4 << 16) + 0,
} API_AVAILABLE(macos(10.11), ios(9.0));

// MTLLibrary.h: typedef NS_ENUM(NSInteger, MTLMathMode) { MTLMathModeSafe = 0, MTLMathModeRelaxed = 1, MTLMathModeFast = 2 } API_AVAILABLE(macos(15.0), ios(18.0));
typedef enum MTLMathMode : NSInteger MTLMathMode;
enum MTLMathMode : NSInteger {
  MTLMathModeSafe = 0,
  MTLMathModeFast = 2,
} API_AVAILABLE(macos(15.0), ios(18.0));

// MTLLibrary.h: typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions) { MTLMathFloatingPointFunctionsFast = 0, MTLMathFloatingPointFunctionsPrecise = 1 } API_AVAILABLE(macos(15.0), ios(18.0));
typedef enum MTLMathFloatingPointFunctions : NSInteger MTLMathFloatingPointFunctions;
enum MTLMathFloatingPointFunctions : NSInteger {
  MTLMathFloatingPointFunctionsFast = 0,
  MTLMathFloatingPointFunctionsPrecise = 1,
} API_AVAILABLE(macos(15.0), ios(18.0));

// MTLLibrary.h: @interface MTLCompileOptions : NSObject <NSCopying>
@interface MTLCompileOptions : NSObject
// MTLLibrary.h: @property (readwrite, nonatomic) MTLMathMode mathMode API_AVAILABLE(macos(15.0), ios(18.0));
@property(readwrite, nonatomic) MTLMathMode mathMode API_AVAILABLE(macos(15.0), ios(18.0));
// MTLLibrary.h: @property (nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions API_AVAILABLE(macos(15.0), ios(18.0));
@property(nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions API_AVAILABLE(macos(15.0), ios(18.0));
// MTLLibrary.h: @property (readwrite, nonatomic) MTLLanguageVersion languageVersion API_AVAILABLE(macos(10.11), ios(9.0));
@property(readwrite, nonatomic) MTLLanguageVersion languageVersion API_AVAILABLE(macos(10.11), ios(9.0));
@end

// ---- MTLComputePipeline.h ----

// MTLComputePipeline.h: @protocol MTLComputePipelineState <MTLAllocation>
@protocol MTLComputePipelineState <NSObject>
// MTLComputePipeline.h: @property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end

// ---- MTLCommandEncoder.h / MTLComputeCommandEncoder.h ----

// MTLCommandEncoder.h: @protocol MTLCommandEncoder <NSObject>
@protocol MTLCommandEncoder <NSObject>
@end

// MTLComputeCommandEncoder.h: @protocol MTLComputeCommandEncoder <MTLCommandEncoder>
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
// MTLComputeCommandEncoder.h: - (void)setComputePipelineState:(id <MTLComputePipelineState>)state;
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
// MTLComputeCommandEncoder.h: - (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index API_AVAILABLE(macos(10.11), ios(8.3));
- (void)setBytes:(const void*)bytes
          length:(NSUInteger)length
         atIndex:(NSUInteger)index API_AVAILABLE(macos(10.11), ios(8.3));
// MTLComputeCommandEncoder.h: - (void)setBuffer:(nullable id <MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
// MTLComputeCommandEncoder.h: - (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup API_AVAILABLE(macos(10.13), ios(11.0));
- (void)dispatchThreads:(MTLSize)threadsPerGrid
    threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup API_AVAILABLE(macos(10.13), ios(11.0));
@end

// ---- MTLCommandBuffer.h / MTLCommandQueue.h / MTLEvent.h (named by torch's MPSStream.h) ----

// MTLCommandBuffer.h: @protocol MTLCommandBuffer <NSObject>
@protocol MTLCommandBuffer <NSObject>
@end

// MTLCommandBuffer.h: typedef void (^MTLCommandBufferHandler)(id <MTLCommandBuffer>);
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

// MTLCommandQueue.h: @protocol MTLCommandQueue <NSObject>
@protocol MTLCommandQueue <NSObject>
@end

// MTLEvent.h: @protocol MTLEvent <NSObject>
@protocol MTLEvent <NSObject>
@end

// MTLEvent.h: @protocol MTLSharedEvent <MTLEvent>
@protocol MTLSharedEvent <MTLEvent>
@end

// ---- MTLDevice.h ----

// MTLDevice.h: typedef NS_ENUM(NSInteger, MTLGPUFamily) { ...
//   MTLGPUFamilyMetal4 API_AVAILABLE(macos(26.0), ios(26.0)) = 5002 } API_AVAILABLE(macos(10.15), ios(13.0));
// (the backend spells MTLGPUFamilyMetal4 as its value, so that it builds with the macOS 15 SDK)
typedef enum MTLGPUFamily : NSInteger MTLGPUFamily;
enum MTLGPUFamily : NSInteger {
  MTLGPUFamilyMetal4 API_AVAILABLE(macos(26.0), ios(26.0)) = 5002,
} API_AVAILABLE(macos(10.15), ios(13.0));

// MTLDevice.h: @protocol MTLDevice <NSObject>
@protocol MTLDevice <NSObject>
// MTLDevice.h: @property (nonnull, readonly) NSString *name;
@property(nonnull, readonly) NSString* name;
// MTLDevice.h: - (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily API_AVAILABLE(macos(10.15), ios(13.0));
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily API_AVAILABLE(macos(10.15), ios(13.0));
// MTLDevice.h: - (nullable id <MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
// MTLDevice.h: - (nullable id <MTLLibrary>)newLibraryWithSource:(NSString *)source options:(nullable MTLCompileOptions *)options error:(__autoreleasing NSError **)error;
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(__autoreleasing NSError* _Nullable* _Nullable)error;
// MTLDevice.h: - (nullable id <MTLComputePipelineState>)newComputePipelineStateWithFunction:(id <MTLFunction>)computeFunction error:(__autoreleasing NSError **)error;
- (nullable id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                  error:(__autoreleasing NSError* _Nullable* _Nullable)error;
@end

// MTLDevice.h: MTL_EXTERN id <MTLDevice> __nullable MTLCreateSystemDefaultDevice(void) API_AVAILABLE(macos(10.11), ios(8.0)) NS_RETURNS_RETAINED;
extern "C" id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void)
    API_AVAILABLE(macos(10.11), ios(8.0)) __attribute__((ns_returns_retained));

#pragma clang assume_nonnull end
