/* fuzz_head_config.c - head_config.json read by the head loader (engine/task/load_head.c) next to
 * real head weights, the fixture folder as the task's head folder; see fuzz_task_common.h. */
#define FUZZ_FILE "head_config.json"
#define FUZZ_HEAD_DIR
#include "fuzz_task_common.h"
