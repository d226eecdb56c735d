/* fuzz_adapter_config.c - adapter_config.json (AdapterHub and PEFT forms) read by the task loaders
 * (engine/task/load*.c) next to real adapter weights; see fuzz_task_common.h. */
#define FUZZ_FILE "adapter_config.json"
#include "fuzz_task_common.h"
