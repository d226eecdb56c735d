/* fuzz_head_config.c - head_config.json read by the head loader (engine/task/load_head.c) next to
 * real head weights; see fuzz_task_common.h. */
#define FUZZ_FILE "head_config.json"
#include "fuzz_task_common.h"
