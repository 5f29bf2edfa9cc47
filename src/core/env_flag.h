// On/off switches read from the environment (FTUNE_REQUIRE_CUDNN, FTUNE_CUDA_DEBUG_SYNC): one
// spelling rule for all of them, so that a switch is never silently ignored.
//   unset or empty, "0", "false", "off", "no"  -> off
//   "1", "true", "on", "yes"                   -> on   (case-insensitive)
//   anything else                              -> InputError naming the variable and its value
#pragma once

namespace ftune {

bool env_flag(const char* name);
// The rule above applied to a value (null: unset); `name` is for the error message.
bool parse_env_flag(const char* name, const char* value);

}  // namespace ftune
