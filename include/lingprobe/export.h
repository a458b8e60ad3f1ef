/* The one export macro of lingprobe's C ABI. The library is built with
 * -fvisibility=hidden; only declarations marked LINGPROBE_API are exported. */
#ifndef LINGPROBE_EXPORT_H
#define LINGPROBE_EXPORT_H

#if defined(LINGPROBE_BUILDING_LIBRARY)
#define LINGPROBE_API __attribute__((visibility("default")))
#else
#define LINGPROBE_API
#endif

#ifdef __cplusplus
#define LINGPROBE_EXTERN_C_BEGIN extern "C" {
#define LINGPROBE_EXTERN_C_END }
#else
#define LINGPROBE_EXTERN_C_BEGIN
#define LINGPROBE_EXTERN_C_END
#endif

#endif /* LINGPROBE_EXPORT_H */
