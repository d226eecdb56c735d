/* portable_bmi2.c - a fixture for engine_kernel_isa_refuses_*: a baseline file compiled for x86-64-v3
 * (tests/CMakeLists.txt), so its variable shift is BMI2's shrx, issue 41's instruction. */
unsigned isa_fixture_shift(unsigned a, unsigned b); /* no header: nothing calls it */
unsigned isa_fixture_shift(unsigned a, unsigned b) { return a >> b; }
