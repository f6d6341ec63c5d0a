// The out-of-line parts of jobpact/transition_event.h. The runner's own
// observers are in transition_observers.cc.
#include "jobpact/transition_event.h"

namespace jobpact {

TransitionObserver::~TransitionObserver() = default;

}  // namespace jobpact
