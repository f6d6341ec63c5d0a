// File: jobpact/jobpact.h
//
// Umbrella header: includes the whole public core API.
#ifndef JOBPACT_JOBPACT_H_
#define JOBPACT_JOBPACT_H_

#include "jobpact/clock.h"
#include "jobpact/random.h"
#include "jobpact/result.h"
#include "jobpact/status.h"
#include "jobpact/version.h"

#endif  // JOBPACT_JOBPACT_H_
