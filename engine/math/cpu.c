/* cpu.c - what every architecture shares of CPU detection (cpu.h): the level cap, its checks and
 * messages, the feature names, the denormal mode of engine threads. The architecture's own part
 * (how to ask the CPU, its levels, its float mode register) is one file set chosen by CMake
 * (cpu_arch.h: x86/cpu_x86.c, arm/cpu_arm.c, generic/cpu_generic.c).
 *
 * Detection runs once (pthread_once); the result is read with one relaxed atomic load, so kernels
 * may ask at every call. */
#include "math/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "math/cpu_arch.h"

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static unsigned detected;
static atomic_uint mask = ENG_CPU_ALL;
static unsigned env_cap = ENG_CPU_ALL; /* ADAPTERD_CPU_LEVEL's features: no restriction goes above it */

#define levels eng__cpu_levels
#define N_LEVELS eng__cpu_n_levels

long long eng__cpu_level_mask(const char *name) {
    if (!name) return -1;
    if (!strcasecmp(name, "native")) return (long long)ENG_CPU_ALL;
    for (size_t i = 0; i < N_LEVELS; i++)
        if (!strcasecmp(name, levels[i].name)) return (long long)levels[i].mask;
    return -1;
}

const char *eng__cpu_level_name(size_t i) { return i < N_LEVELS ? levels[i].name : NULL; }

const char *eng__cpu_level_of(unsigned f) {
    const char *best = levels[0].name;
    for (size_t i = 1; i < N_LEVELS; i++)
        if ((f & levels[i].mask) == levels[i].mask) best = levels[i].name;
    return best;
}

static void detect(void) {
    detected = eng__cpu_detect();
    long long cap = eng__cpu_level_mask(getenv(ENG_CPU_LEVEL_ENV)); /* unknown names: eng__cpu_level_check says so */
    if (cap >= 0) env_cap = (unsigned)cap;
    atomic_store(&mask, env_cap);
}

unsigned eng__cpu_detected(void) {
    pthread_once(&detect_once, detect);
    return detected;
}

int eng__cpu_level_check(const char *name, char *msg, int n) {
    if (n > 0) msg[0] = '\0';
    if (!name) name = getenv(ENG_CPU_LEVEL_ENV);
    if (!name) return 0;
    long long m = eng__cpu_level_mask(name);
    if (m < 0) {
        int len = snprintf(msg, (size_t)(n > 0 ? n : 0), "unknown CPU level \"%s\" (known: native", name);
        for (size_t i = 0; i < N_LEVELS && len >= 0 && len < n; i++)
            len += snprintf(msg + len, (size_t)(n - len), ", %s", levels[i].name);
        if (len >= 0 && len < n) snprintf(msg + len, (size_t)(n - len), ")");
        return -1;
    }
    unsigned lack = (unsigned)m & ~eng__cpu_detected();
    if ((unsigned)m == ENG_CPU_ALL || !lack) return 0;
    char need[128], have[128], missing[256];
    eng__cpu_describe(lack, need, sizeof need);
    eng__cpu_describe(eng__cpu_detected(), have, sizeof have);
    eng__cpu_lacking(lack, missing, sizeof missing); /* AVX2 listed by the CPU, BMI2 not: say so */
    snprintf(msg, (size_t)(n > 0 ? n : 0), "CPU level %s needs %s, which this CPU lacks (it has: %s%s%s)", name, need,
             have, missing[0] ? "; missing: " : "", missing);
    return -1;
}

int eng__cpu_set_level(const char *name) {
    long long m = eng__cpu_level_mask(name);
    if (m < 0) return -1;
    pthread_once(&detect_once, detect);
    env_cap = (unsigned)m; /* replaces the environment's cap: a flag wins over the variable */
    atomic_store(&mask, env_cap);
    return 0;
}

unsigned eng__cpu_features(void) {
    pthread_once(&detect_once, detect);
    return detected & atomic_load_explicit(&mask, memory_order_relaxed);
}

int eng__cpu_has(unsigned f) { return (eng__cpu_features() & f) == f; }

void eng__cpu_restrict(unsigned m) {
    pthread_once(&detect_once, detect); /* reads the environment's cap */
    atomic_store(&mask, m & env_cap);
}

void eng__cpu_describe(unsigned f, char *buf, int n) {
    if (n <= 0) return;
    buf[0] = '\0';
    int len = 0;
    for (size_t i = 0; i < eng__cpu_n_feature_names; i++) {
        if (!(f & eng__cpu_feature_names[i].bit)) continue;
        int w = snprintf(buf + len, (size_t)(n - len), "%s%s", len ? " " : "", eng__cpu_feature_names[i].name);
        if (w < 0 || w >= n - len) return;
        len += w;
    }
    if (!len) snprintf(buf, (size_t)n, "none");
}

static atomic_int keep_denormals;

void eng__cpu_keep_denormals(int keep) { atomic_store(&keep_denormals, keep != 0); }

void eng__cpu_flush_denormals(void) { eng__cpu_fp_flush(!atomic_load_explicit(&keep_denormals, memory_order_relaxed)); }

int eng__cpu_denormals_flushed(void) { return eng__cpu_fp_flushed(); }
