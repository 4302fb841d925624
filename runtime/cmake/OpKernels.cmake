# OpKernels: see runtime/CMakeLists.txt
