// File: jobpact/export.h
//
// JOBPACT_EXPORT marks the public API. The library is built with hidden
// visibility, so only marked symbols are visible when it is linked into a
// shared object.
#ifndef JOBPACT_EXPORT_H_
#define JOBPACT_EXPORT_H_

#if defined(_WIN32)
#define JOBPACT_EXPORT
#else
#define JOBPACT_EXPORT [[gnu::visibility("default")]]
#endif

#endif  // JOBPACT_EXPORT_H_
