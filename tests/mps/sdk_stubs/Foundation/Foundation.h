// Stand-in for <Foundation/Foundation.h> (macOS SDK): only what the MPS backend
// and torch's ATen/mps headers use, with the SDK's availability (API_AVAILABLE)
// where the SDK gives one.
#pragma once

#import <Foundation/NSObjectBase.h>
#import <dispatch/dispatch.h>

#pragma clang assume_nonnull begin

// NSString.h: typedef NSUInteger NSStringEncoding;
typedef NSUInteger NSStringEncoding;
// NSString.h: NSUTF8StringEncoding = 4,
enum : NSStringEncoding { NSUTF8StringEncoding = 4 };

// NSString.h: @interface NSString : NSObject <NSCopying, NSMutableCopying, NSSecureCoding>
@interface NSString : NSObject
// NSString.h: - (nullable instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;
- (nullable instancetype)initWithBytes:(const void*)bytes
                                length:(NSUInteger)len
                              encoding:(NSStringEncoding)encoding;
// NSString.h: + (nullable instancetype)stringWithUTF8String:(const char *)nullTerminatedCString;
+ (nullable instancetype)stringWithUTF8String:(const char*)nullTerminatedCString;
// NSString.h: @property (nullable, readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;
@property(nullable, readonly) const char* UTF8String __attribute__((objc_returns_inner_pointer));
// NSString.h: - (BOOL)isEqualToString:(NSString *)aString;
- (BOOL)isEqualToString:(NSString*)aString;
@end

// NSError.h: typedef NSString *NSErrorDomain;
typedef NSString* NSErrorDomain;

// NSError.h: @interface NSError : NSObject <NSCopying, NSSecureCoding>
@interface NSError : NSObject
// NSError.h: @property (readonly, copy) NSErrorDomain domain;
@property(readonly, copy) NSErrorDomain domain;
// NSError.h: @property (readonly) NSInteger code;
@property(readonly) NSInteger code;
// NSError.h: @property (readonly, copy) NSString *localizedDescription;
@property(readonly, copy) NSString* localizedDescription;
@end

// NSString.h: @interface NSString (NSStringExtensionMethods)
//   + (nullable instancetype)stringWithContentsOfFile:(NSString *)path encoding:(NSStringEncoding)enc error:(NSError **)error;
// NSPathUtilities.h: @interface NSString (NSStringPathExtensions)
//   @property (readonly, copy) NSString *lastPathComponent;
@interface NSString (coreai_stub_file_and_path)
+ (nullable instancetype)stringWithContentsOfFile:(NSString*)path
                                         encoding:(NSStringEncoding)enc
                                            error:(NSError* _Nullable* _Nullable)error;
@property(readonly, copy) NSString* lastPathComponent;
@end

// NSDictionary.h: @interface NSDictionary<__covariant KeyType, __covariant ObjectType> : NSObject <...>
// (torch's MPSStream.h names it in executeMPSGraph's signature)
@interface NSDictionary : NSObject
@end

// NSProcessInfo.h: typedef struct { NSInteger majorVersion; NSInteger minorVersion; NSInteger patchVersion; } NSOperatingSystemVersion;
typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;

// NSProcessInfo.h: @interface NSProcessInfo : NSObject
@interface NSProcessInfo : NSObject
// NSProcessInfo.h: @property (class, readonly, strong) NSProcessInfo *processInfo;
@property(class, readonly, strong) NSProcessInfo* processInfo;
// NSProcessInfo.h: @property (readonly) NSOperatingSystemVersion operatingSystemVersion API_AVAILABLE(macos(10.10), ios(8.0), watchos(2.0), tvos(9.0));
@property(readonly) NSOperatingSystemVersion operatingSystemVersion API_AVAILABLE(macos(10.10), ios(8.0));
@end

#pragma clang assume_nonnull end
