# KILN_SITE_PACKAGES: Python's site-packages folders, of python3 on the PATH
# and of the system's, where PyTorch's nvidia-* wheels put NCCL
# (nvidia/nccl) and cuDNN (nvidia/cudnn). Included by Nccl.cmake and
# Cudnn.cmake; computed once.
include_guard(GLOBAL)
set(KILN_SITE_PACKAGES "")
find_program(KILN_PYTHON3 python3)
foreach(python ${KILN_PYTHON3} /usr/bin/python3)
  if(EXISTS "${python}")
    execute_process(COMMAND "${python}" -c
      "import site, sysconfig; p = getattr(site, 'getsitepackages', list)(); p += [site.getusersitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]; print(';'.join(p))"
      OUTPUT_VARIABLE sites OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    list(APPEND KILN_SITE_PACKAGES ${sites})
  endif()
endforeach()
list(REMOVE_DUPLICATES KILN_SITE_PACKAGES)
