// The one source of jobpact_test_pch (tests/CMakeLists.txt): the target
// exists to build the precompiled GoogleTest headers that the test programs
// reuse, and CMake wants a source to attach them to. Compiles to nothing.
