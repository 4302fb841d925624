# Nccl: see runtime/CMakeLists.txt
