// The holder targets of the precompiled headers (cmake/pch/CMakeLists.txt) need one source file;
// the test holder links GoogleTest's main, so it is a test program with no tests.
