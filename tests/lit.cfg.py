# lit configuration for Kiln's FileCheck tests.
import os

import lit.formats

config.name = "Kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test", ".toml"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "check_plan.py", "group_ops.py", "mutate_plan.py", "check_sample.py", "check_loss.py", "check_safetensors.py", "compare_runs.py", "kill_rank.py", "check_trace.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "tests")

config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
# Diagnostics and tool output must not depend on the caller's terminal.
config.environment["LC_ALL"] = "C"

config.substitutions.append(("%kiln_src", config.kiln_src_root))
config.substitutions.append(("%kiln_obj", config.kiln_obj_root))
config.substitutions.append(("%python", "/usr/bin/python3"))
# Debian's python3 with transformers, the oracle of the Hugging Face paths
# (scripts/bootstrap installs it into .deps/hf-python).
config.substitutions.append(
    ("%hfpython", "env PYTHONPATH=" +
     os.path.join(config.kiln_src_root, ".deps", "hf-python") +
     " /usr/bin/python3"))
# Longest first: %kiln would otherwise eat the front of %kiln_run.
for tool in ["kiln-group-kernel-check", "kiln-op-kernel-check",
             "kiln-plan-fuzz",
             "kiln-cuda-actions-check",
             "kiln-nvrtc-check", "kiln-tp-oracle", "kiln-hf-oracle",
             "kiln-run",
             "kiln-opt", "kiln"]:
    config.substitutions.append(
        ("%" + tool.replace("-", "_"), os.path.join(config.kiln_tools_dir, tool)))
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
# Multi-rank runs: Open MPI as root in containers, more ranks than cores,
# one BLAS thread per rank.
if config.kiln_have_cuda:
    config.available_features.add("cuda-toolkit")
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
config.substitutions.append(
    ("%mpirun", "timeout 300 mpirun --oversubscribe -x OPENBLAS_NUM_THREADS=1 -np"))
config.substitutions.append(
    ("%expect_exit", "/usr/bin/python3 " + os.path.join(config.test_source_root, "expect-exit")))
