// The anchors of the contract suite sources (private to jobpact::contract).
//
// Each suite source defines one; LinkAllSuites() (contract_support.cc) calls
// them all, and JOBPACT_INSTANTIATE_BACKEND_CONTRACT calls LinkAllSuites(),
// so a program that instantiates the suite refers to a symbol of every suite
// object file and the linker takes each out of the static library, TEST_P
// registrations included (see jobpact/testing/backend_contract.h). A new
// suite source adds its anchor here and to LinkAllSuites().
#ifndef JOBPACT_SRC_TESTING_CONTRACT_SUITE_ANCHORS_H_
#define JOBPACT_SRC_TESTING_CONTRACT_SUITE_ANCHORS_H_

namespace jobpact {
namespace testing {
namespace contract_internal {

int QueueContractAnchor();             // queue_contract.cc
int DeadLetterContractAnchor();        // dlq_contract.cc
int LockStoreContractAnchor();         // lock_contract.cc
int IdempotencyStoreContractAnchor();  // idempotency_contract.cc
int ConcurrencyContractAnchor();       // concurrency_contract.cc
int LeaseContractAnchor();             // lease_contract.cc
int AdminContractAnchor();             // admin_contract.cc
int HostileInputContractAnchor();      // hostile_input_contract.cc
int RateLimitContractAnchor();         // rate_limit_contract.cc
int FairnessContractAnchor();          // fairness_contract.cc
int GuardsContractAnchor();            // guards_contract.cc
int RetentionContractAnchor();         // retention_contract.cc

}  // namespace contract_internal
}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_SRC_TESTING_CONTRACT_SUITE_ANCHORS_H_
