# Gemm: see runtime/CMakeLists.txt
