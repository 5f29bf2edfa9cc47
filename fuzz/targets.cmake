# The libFuzzer targets, each as NAME:LIBRARY (fuzz/fuzz_NAME.cc; the fuzz build links it with
# ftune_LIBRARY_fuzz, see fuzz/CMakeLists.txt). fuzz/replay.cmake compiles the same list into the
# test suite's fuzz_replay.
set(FTUNE_FUZZ_TARGETS tokenizer_json:text encode:text regex:text tokenizer_config:text
    safetensors:io checkpoint:io model_config:model model_dir:model peft_adapter:model)
