# CudaExecutor: see runtime/CMakeLists.txt
