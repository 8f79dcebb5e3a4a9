/*
 * A fake libnvidia-ml.so.1 for gpulens' tests.
 *
 * The real nvidia-ml-py bindings load this library (LD_LIBRARY_PATH is set before Python starts) and
 * call it exactly as they call the driver's, so the exporter's NVML code is tested end to end with
 * no Python mock in between. Only the entry points gpulens uses are implemented; pynvml reports any
 * other as NVML_ERROR_FUNCTION_NOT_FOUND, which is what an older driver does too.
 *
 * GPU state comes from the file named by $FAKE_NVML_STATE, one `key=value` per line (written by
 * FakeNvml.write in tests/helpers.py). The file is re-read whenever it is replaced, so tests
 * rewrite it atomically (write a temporary file, rename it over) while the exporter runs.
 *
 * Utilization samples (nvmlDeviceGetSamples) as the driver keeps them: a ring of the last RING samples
 * per type, stamped with the CPU time in microseconds. util_samples=<us>:<percent>,... (and mem_samples)
 * put samples in the ring as given; sample_period_ms=<ms> makes the fake sample util_gpu and util_memory
 * itself every <ms>, from the moment the state file is loaded. A GPU with neither keeps no samples and
 * answers NVML_ERROR_NOT_SUPPORTED, like a driver that does not offer them.
 *
 * Faults, per GPU: lost=1 (every call answers NVML_ERROR_GPU_IS_LOST), not_supported=<fn>,<fn>
 * (NVML_ERROR_NOT_SUPPORTED), flaky=<fn> (every other call fails with NVML_ERROR_UNKNOWN),
 * hang=<fn> with hang_ms=<ms> (the call blocks that long). Globally: init_error=<nvmlReturn_t>.
 *
 * Older drivers: compiled with -DDRIVER_BRANCH=<branch>, the library lacks the entry points NVIDIA added
 * after that branch, as the driver's own library does, so pynvml answers NVML_ERROR_FUNCTION_NOT_FOUND
 * for them. Older entry points stay, as they do in every driver:
 *   < 535: no nvmlDeviceGetCurrentClocksEventReasons (only its older name, ...ClocksThrottleReasons);
 *   < 520: no GPM (nvmlGpm*);
 *   < 510: no nvmlDeviceGetComputeRunningProcesses_v3 and no nvmlDeviceGetMemoryInfo_v2;
 *   < 470: no nvmlDeviceGetComputeRunningProcesses_v2: only the first version, with the 16-byte
 *          nvmlProcessInfo_v1_t.
 * The default is a current driver, with all of them.
 */
#define _GNU_SOURCE
#ifndef DRIVER_BRANCH
#define DRIVER_BRANCH 580
#endif
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 128 /* a benchmark's 64-GPU node and room beyond */
#define MAX_MIG 8
#define MAX_PROCS 128
#define MAX_XIDS 512
#define MAX_GPM 16
#define TEXT 96
#define LIST 512
#define RING 120

typedef struct {
    unsigned long long ts; /* CPU time, microseconds */
    unsigned value;        /* percent */
} sample_t;
typedef struct {
    sample_t s[RING];
    int start, n;
} ring_t;

static void ring_push(ring_t *r, unsigned long long ts, unsigned value) {
    if (r->n == RING) { /* full: the oldest sample is overwritten, as in the driver's buffer */
        r->start = (r->start + 1) % RING;
        r->n--;
    }
    sample_t *slot = &r->s[(r->start + r->n) % RING];
    slot->ts = ts;
    slot->value = value;
    r->n++;
}

typedef struct {
    unsigned pid;
    char name[64];
    unsigned long long memory;
    unsigned sm_util;
    unsigned gi;
} proc_t;

typedef struct device {
    int exists, is_mig, index;
    struct device *parent;
    char uuid[TEXT], name[TEXT], pci_bus_id[32];
    unsigned lost;
    unsigned util_gpu, util_memory;
    unsigned long long memory_total, memory_reserved, memory_used;
    unsigned long long pcie_tx_bytes, pcie_rx_bytes, nvlink_tx_kib, nvlink_rx_kib;
    unsigned nvlink_links;
    char nvlink_down[LIST]; /* link indices, ",2,7," */
    unsigned long long nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery;
    unsigned sm_clock_mhz, sm_clock_max_mhz, memory_clock_mhz;
    unsigned power_mw, power_limit_mw;
    unsigned long long energy_mj;
    unsigned temperature_c;
    unsigned long long clock_event_reasons;
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned remapped_correctable, remapped_uncorrectable, remap_pending, remap_failure;
    unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    unsigned mig_mode, mig_count, gi, ci;
    unsigned gpm;
    double gpm_values[MAX_GPM];
    int gpm_set[MAX_GPM];
    int nproc;
    proc_t procs[MAX_PROCS];
    int nxid;
    unsigned xids[MAX_XIDS];
    char not_supported[LIST], flaky[LIST], hang[LIST];
    unsigned hang_ms;
    ring_t util_ring, mem_ring;
    int keeps_samples;
    unsigned sample_period_ms;
    unsigned long long next_sample_us;
} device_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static device_t gpus[MAX_GPUS];
static device_t migs[MAX_GPUS][MAX_MIG];
static unsigned flaky_calls[MAX_GPUS][MAX_MIG + 1];
static int topology[MAX_GPUS][MAX_GPUS]; /* nvmlGpuTopologyLevel_t, or -1 */
static char p2p[MAX_GPUS][MAX_GPUS][8];  /* "nvlink", "pcie", "none", or "" (not set: NOT_SUPPORTED) */
static unsigned device_count;
/* count_calls= in the state file names a function whose calls are counted into FAKE_NVML_STATE.calls, so that
   a test waits for the exporter's reads (its samples, its re-enumerations) rather than for time. */
static char count_fn[64];
static unsigned long counted_calls;
/* GPU slots the last state file touched: a reload clears only those, so that a 128-slot table costs a
   process (the exporter's resident memory in the benchmarks) only the GPUs a test describes. */
static int slots_used;
static int init_error;
static int initialized;
static char driver_version[TEXT] = "999.99.99";
static char nvml_version[TEXT] = "12.999.99";
static ino_t state_ino;
static struct timespec state_mtime;
static int state_loaded;

/* ---- the state file ------------------------------------------------------------------------ */

typedef enum { U32, U64, STR, STR_PCI, LISTSTR } kind_t;
typedef struct {
    const char *key;
    size_t offset;
    kind_t kind;
} field_t;

#define F(name, kind) {#name, offsetof(device_t, name), kind}
static const field_t FIELDS[] = {
    F(uuid, STR), F(name, STR), F(pci_bus_id, STR_PCI), F(lost, U32), F(util_gpu, U32), F(util_memory, U32),
    F(memory_total, U64), F(memory_reserved, U64), F(memory_used, U64), F(pcie_tx_bytes, U64),
    F(pcie_rx_bytes, U64), F(nvlink_tx_kib, U64), F(nvlink_rx_kib, U64), F(nvlink_links, U32),
    F(nvlink_down, LISTSTR), F(nvlink_crc_flit, U64), F(nvlink_crc_data, U64), F(nvlink_replay, U64),
    F(nvlink_recovery, U64),
    F(sm_clock_mhz, U32), F(sm_clock_max_mhz, U32), F(memory_clock_mhz, U32), F(power_mw, U32),
    F(power_limit_mw, U32), F(energy_mj, U64), F(temperature_c, U32), F(clock_event_reasons, U64),
    F(ecc_corrected, U64), F(ecc_uncorrected, U64), F(remapped_correctable, U32),
    F(remapped_uncorrectable, U32), F(remap_pending, U32), F(remap_failure, U32), F(pcie_gen, U32),
    F(pcie_gen_max, U32), F(pcie_width, U32), F(pcie_width_max, U32), F(mig_mode, U32), F(mig_count, U32),
    F(gi, U32), F(ci, U32), F(gpm, U32), F(not_supported, LISTSTR), F(flaky, LISTSTR), F(hang, LISTSTR),
    F(hang_ms, U32), F(sample_period_ms, U32),
};

static void set_field(device_t *d, const char *key, const char *value) {
    if (strncmp(key, "gpm.", 4) == 0) { /* gpm.<metric id>=<percent> */
        int id = atoi(key + 4);
        if (id > 0 && id < MAX_GPM) {
            d->gpm_values[id] = strtod(value, NULL);
            d->gpm_set[id] = 1;
        }
        return;
    }
    if (strcmp(key, "util_samples") == 0 || strcmp(key, "mem_samples") == 0) { /* <us>:<percent>,... */
        ring_t *r = key[0] == 'u' ? &d->util_ring : &d->mem_ring;
        d->keeps_samples = 1;
        for (const char *p = value; *p;) {
            unsigned long long ts = strtoull(p, (char **)&p, 10);
            if (*p != ':') break;
            unsigned percent = (unsigned)strtoul(p + 1, (char **)&p, 10);
            ring_push(r, ts, percent);
            while (*p == ',' || *p == ' ') p++;
        }
        return;
    }
    if (strcmp(key, "xids") == 0) { /* every XID ever raised, in order; new ones become events */
        d->nxid = 0;
        for (const char *p = value; *p && d->nxid < MAX_XIDS;) {
            d->xids[d->nxid++] = (unsigned)strtoul(p, (char **)&p, 10);
            while (*p == ',' || *p == ' ') p++;
        }
        return;
    }
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        if (strcmp(FIELDS[i].key, key) != 0) continue;
        char *at = (char *)d + FIELDS[i].offset;
        switch (FIELDS[i].kind) {
        case U32: *(unsigned *)at = (unsigned)strtoull(value, NULL, 0); break;
        case U64: *(unsigned long long *)at = strtoull(value, NULL, 0); break;
        case STR: snprintf(at, TEXT, "%s", value); break;
        case STR_PCI: snprintf(at, 32, "%s", value); break;
        case LISTSTR: snprintf(at, LIST, ",%s,", value); break;
        }
        return;
    }
    fprintf(stderr, "fake NVML: unknown key '%s' in state file\n", key);
}

static void parse_line(char *line) {
    char *eq = strchr(line, '=');
    if (!eq || line[0] == '#') return;
    *eq = 0;
    char *key = line, *value = eq + 1;
    char *nl = strchr(value, '\n');
    if (nl) *nl = 0;
    if (strcmp(key, "driver_version") == 0) { snprintf(driver_version, TEXT, "%s", value); return; }
    if (strcmp(key, "nvml_version") == 0) { snprintf(nvml_version, TEXT, "%s", value); return; }
    if (strcmp(key, "init_error") == 0) { init_error = atoi(value); return; }
    if (strcmp(key, "device_count") == 0) { device_count = (unsigned)atoi(value); return; }
    if (strcmp(key, "count_calls") == 0) { snprintf(count_fn, sizeof count_fn, "%s", value); return; }
    int a, b, n;
    if (sscanf(key, "topo.%d.%d%n", &a, &b, &n) == 2 && key[n] == 0) {
        if (a >= 0 && a < MAX_GPUS && b >= 0 && b < MAX_GPUS) topology[a][b] = atoi(value);
        return;
    }
    if (sscanf(key, "p2p.%d.%d%n", &a, &b, &n) == 2 && key[n] == 0) { /* p2p.A.B=nvlink|pcie|none */
        if (a >= 0 && a < MAX_GPUS && b >= 0 && b < MAX_GPUS) snprintf(p2p[a][b], sizeof p2p[a][b], "%s", value);
        return;
    }
    if (sscanf(key, "gpu%d.%n", &a, &n) != 1 || a < 0 || a >= MAX_GPUS) {
        fprintf(stderr, "fake NVML: unknown key '%s' in state file\n", key);
        return;
    }
    device_t *gpu = &gpus[a];
    if (a >= slots_used) slots_used = a + 1;
    gpu->exists = 1;
    gpu->index = a;
    char *rest = key + n;
    int m2;
    if (sscanf(rest, "mig%d.%n", &b, &m2) == 1 && b >= 0 && b < MAX_MIG) {
        device_t *mig = &migs[a][b];
        mig->exists = mig->is_mig = 1;
        mig->index = b;
        mig->parent = gpu;
        set_field(mig, rest + m2, value);
        return;
    }
    if (sscanf(rest, "proc%d.%n", &b, &m2) == 1 && b >= 0 && b < MAX_PROCS) {
        if (b >= gpu->nproc) gpu->nproc = b + 1;
        proc_t *p = &gpu->procs[b];
        const char *field = rest + m2;
        if (strcmp(field, "pid") == 0) p->pid = (unsigned)atoi(value);
        else if (strcmp(field, "name") == 0) snprintf(p->name, sizeof p->name, "%s", value);
        else if (strcmp(field, "memory") == 0) p->memory = strtoull(value, NULL, 0);
        else if (strcmp(field, "sm_util") == 0) p->sm_util = (unsigned)atoi(value);
        else if (strcmp(field, "gi") == 0) p->gi = (unsigned)atoi(value);
        return;
    }
    set_field(gpu, rest, value);
}

/* Re-read the state file if it was replaced. Called with `mu` held. */
static void refresh(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (state_loaded && st.st_ino == state_ino && st.st_mtim.tv_sec == state_mtime.tv_sec &&
        st.st_mtim.tv_nsec == state_mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    /* Handles are pointers into these arrays, so they stay valid across reloads. */
    memset(gpus, 0, sizeof gpus[0] * slots_used);
    memset(migs, 0, sizeof migs[0] * slots_used);
    slots_used = 0;
    memset(topology, -1, sizeof topology); /* -1: not set, answered as NOT_SUPPORTED */
    memset(p2p, 0, sizeof p2p);
    device_count = 0;
    init_error = 0;
    count_fn[0] = 0;
    char *line = NULL; /* lines of samples are long: getline grows the buffer */
    size_t size = 0;
    while (getline(&line, &size, f) > 0) parse_line(line);
    free(line);
    fclose(f);
    state_ino = st.st_ino;
    state_mtime = st.st_mtim;
    state_loaded = 1;
}

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + tv.tv_usec;
}

/* One more call of `fn`, written to FAKE_NVML_STATE.calls (replaced whole) if the state counts its calls. */
static void count_call(const char *fn) {
    const char *path = getenv("FAKE_NVML_STATE");
    if (!path || !count_fn[0] || strcmp(fn, count_fn) != 0) return;
    char name[4096], tmp[4200];
    snprintf(name, sizeof name, "%s.calls", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%lu\n", ++counted_calls);
    fclose(f);
    rename(tmp, name);
}

static int listed(const char *list, const char *fn) {
    char needle[128];
    snprintf(needle, sizeof needle, ",%s,", fn);
    return strstr(list, needle) != NULL;
}

/* The fault gate every device call passes. Called with `mu` held; may drop it to hang. */
static nvmlReturn_t gate(device_t *d, const char *fn) {
    count_call(fn);
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!d || !d->exists) return NVML_ERROR_INVALID_ARGUMENT;
    device_t *gpu = d->is_mig ? d->parent : d;
    if (gpu->lost || d->lost) return NVML_ERROR_GPU_IS_LOST;
    if (listed(gpu->not_supported, fn) || listed(d->not_supported, fn)) return NVML_ERROR_NOT_SUPPORTED;
    if (listed(gpu->hang, fn)) {
        unsigned ms = gpu->hang_ms;
        pthread_mutex_unlock(&mu);
        usleep(ms * 1000);
        pthread_mutex_lock(&mu);
        refresh();
    }
    if (listed(gpu->flaky, fn)) {
        unsigned *calls = &flaky_calls[gpu->index][d->is_mig ? d->index + 1 : 0];
        if ((*calls)++ % 2 == 1) return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

#define BEGIN(fn, handle)                    \
    pthread_mutex_lock(&mu);                 \
    refresh();                               \
    device_t *d = (device_t *)(handle);      \
    nvmlReturn_t rc_ = gate(d, fn);          \
    if (rc_ != NVML_SUCCESS) {               \
        pthread_mutex_unlock(&mu);           \
        return rc_;                          \
    }
#define END(rc)                      \
    do {                             \
        nvmlReturn_t r_ = (rc);      \
        pthread_mutex_unlock(&mu);   \
        return r_;                   \
    } while (0)

static nvmlReturn_t copy_text(char *out, unsigned len, const char *text) {
    if (strlen(text) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

/* ---- library and system ------------------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    refresh();
    int rc = init_error;
    if (rc == NVML_SUCCESS) initialized = 1;
    pthread_mutex_unlock(&mu);
    return rc;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    initialized = 0;
    pthread_mutex_unlock(&mu);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *out, unsigned len) {
    pthread_mutex_lock(&mu);
    refresh();
    nvmlReturn_t rc = initialized ? copy_text(out, len, driver_version) : NVML_ERROR_UNINITIALIZED;
    END(rc);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *out, unsigned len) {
    pthread_mutex_lock(&mu);
    refresh();
    nvmlReturn_t rc = initialized ? copy_text(out, len, nvml_version) : NVML_ERROR_UNINITIALIZED;
    END(rc);
}
nvmlReturn_t nvmlSystemGetProcessName(unsigned pid, char *out, unsigned len) {
    pthread_mutex_lock(&mu);
    refresh();
    for (unsigned g = 0; g < device_count && g < MAX_GPUS; g++)
        for (int i = 0; i < gpus[g].nproc; i++)
            if (gpus[g].procs[i].pid == pid) END(copy_text(out, len, gpus[g].procs[i].name));
    END(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    pthread_mutex_lock(&mu);
    refresh();
    count_call("nvmlDeviceGetCount_v2");
    if (!initialized) END(NVML_ERROR_UNINITIALIZED);
    *count = device_count;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    pthread_mutex_lock(&mu);
    refresh();
    if (!initialized) END(NVML_ERROR_UNINITIALIZED);
    if (index >= device_count || index >= MAX_GPUS) END(NVML_ERROR_INVALID_ARGUMENT);
    if (gpus[index].lost) END(NVML_ERROR_GPU_IS_LOST);
    *device = &gpus[index];
    END(NVML_SUCCESS);
}

/* ---- identity ------------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetUUID(void *h, char *out, unsigned len) {
    BEGIN("nvmlDeviceGetUUID", h);
    END(copy_text(out, len, d->uuid));
}
nvmlReturn_t nvmlDeviceGetName(void *h, char *out, unsigned len) {
    BEGIN("nvmlDeviceGetName", h);
    END(copy_text(out, len, d->name));
}
nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned *index) {
    BEGIN("nvmlDeviceGetIndex", h);
    *index = (unsigned)d->index;
    END(NVML_SUCCESS);
}

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *pci) {
    BEGIN("nvmlDeviceGetPciInfo_v3", h);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->pci_bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", d->pci_bus_id + (strlen(d->pci_bus_id) > 12 ? 4 : 0));
    unsigned domain = 0, bus = 0, dev = 0;
    sscanf(d->pci_bus_id, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    END(NVML_SUCCESS);
}

/* ---- MIG ----------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending) {
    BEGIN("nvmlDeviceGetMigMode", h);
    *current = *pending = d->mig_mode;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count) {
    BEGIN("nvmlDeviceGetMaxMigDeviceCount", h);
    *count = d->mig_mode ? MAX_MIG - 1 : 0;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned index, void **mig) {
    BEGIN("nvmlDeviceGetMigDeviceHandleByIndex", h);
    if (index >= MAX_MIG || !migs[d->index][index].exists) END(NVML_ERROR_NOT_FOUND);
    *mig = &migs[d->index][index];
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *h, unsigned *is_mig) {
    BEGIN("nvmlDeviceIsMigDeviceHandle", h);
    *is_mig = (unsigned)d->is_mig;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
    BEGIN("nvmlDeviceGetGpuInstanceId", h);
    if (!d->is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    *id = d->gi;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *h, unsigned *id) {
    BEGIN("nvmlDeviceGetComputeInstanceId", h);
    if (!d->is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    *id = d->ci;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **parent) {
    BEGIN("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h);
    if (!d->is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    *parent = d->parent;
    END(NVML_SUCCESS);
}

/* ---- utilization and memory ---------------------------------------------------------------- */

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    BEGIN("nvmlDeviceGetUtilizationRates", h);
    if (d->is_mig || d->mig_mode) END(NVML_ERROR_NOT_SUPPORTED); /* as on real MIG GPUs */
    u->gpu = d->util_gpu;
    u->memory = d->util_memory;
    END(NVML_SUCCESS);
}

typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#if DRIVER_BRANCH >= 510
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, nvmlMemory_v2_t *mem) {
    BEGIN("nvmlDeviceGetMemoryInfo_v2", h);
    mem->total = d->memory_total;
    mem->reserved = d->memory_reserved;
    mem->used = d->memory_used;
    mem->free = d->memory_total - d->memory_reserved - d->memory_used;
    END(NVML_SUCCESS);
}
#endif

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

/* The first version: what the driver reserves counts as used (total = free + used). */
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *mem) {
    BEGIN("nvmlDeviceGetMemoryInfo", h);
    mem->total = d->memory_total;
    mem->used = d->memory_reserved + d->memory_used;
    mem->free = d->memory_total - d->memory_reserved - d->memory_used;
    END(NVML_SUCCESS);
}

/* ---- field values (PCIe and NVLink counters) ------------------------------------------------ */

typedef union {
    double dVal;
    unsigned uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

nvmlReturn_t nvmlDeviceGetFieldValues(void *h, int count, nvmlFieldValue_t *values) {
    BEGIN("nvmlDeviceGetFieldValues", h);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        char name[32];
        snprintf(name, sizeof name, "field%u", v->fieldId);
        v->timestamp = (long long)now_us();
        v->nvmlReturn = listed(d->not_supported, name) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        v->valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
        switch (v->fieldId) {
        case 197: v->value.ullVal = d->pcie_tx_bytes; break; /* NVML_FI_DEV_PCIE_COUNT_TX_BYTES */
        case 198: v->value.ullVal = d->pcie_rx_bytes; break; /* NVML_FI_DEV_PCIE_COUNT_RX_BYTES */
        case 138: v->value.ullVal = d->nvlink_tx_kib; break; /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX */
        case 139: v->value.ullVal = d->nvlink_rx_kib; break; /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX */
        case 91: /* NVML_FI_DEV_NVLINK_LINK_COUNT */
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->value.uiVal = d->nvlink_links;
            break;
        case 38: v->value.ullVal = d->nvlink_crc_flit; break;  /* NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL */
        case 45: v->value.ullVal = d->nvlink_crc_data; break;  /* ..._CRC_DATA_ERROR_COUNT_TOTAL */
        case 52: v->value.ullVal = d->nvlink_replay; break;    /* ..._REPLAY_ERROR_COUNT_TOTAL */
        case 59: v->value.ullVal = d->nvlink_recovery; break;  /* ..._RECOVERY_ERROR_COUNT_TOTAL */
        case 165: { /* NVML_FI_DEV_NVLINK_GET_STATE, scopeId = link: NVML_NVLINK_STATE_ACTIVE or _INACTIVE */
            char link[16];
            snprintf(link, sizeof link, "%u", v->scopeId);
            v->valueType = 1;
            if (v->scopeId >= d->nvlink_links) v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            else if (v->nvmlReturn == NVML_SUCCESS) v->value.uiVal = listed(d->nvlink_down, link) ? 0 : 1;
            break;
        }
        default: v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    END(NVML_SUCCESS);
}

/* ---- the driver's sample buffers ----------------------------------------------------------- */

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

/* The samples a driver sampling every sample_period_ms would have taken up to now. */
static void take_samples(device_t *d) {
    if (!d->sample_period_ms) return;
    unsigned long long period = (unsigned long long)d->sample_period_ms * 1000ULL, now = now_us();
    if (!d->next_sample_us) d->next_sample_us = now + period;
    if (d->next_sample_us + RING * period < now) d->next_sample_us = now - (RING - 1) * period;
    for (; d->next_sample_us <= now; d->next_sample_us += period) {
        ring_push(&d->util_ring, d->next_sample_us, d->util_gpu);
        ring_push(&d->mem_ring, d->next_sample_us, d->util_memory);
    }
}

/* As the driver: samples newer than last_seen, oldest first; with samples NULL, how many there are;
 * NVML_ERROR_NOT_FOUND when there is none. */
nvmlReturn_t nvmlDeviceGetSamples(void *h, int type, unsigned long long last_seen, int *value_type, unsigned *count,
                                  nvmlSample_t *samples) {
    BEGIN("nvmlDeviceGetSamples", h);
    if (d->is_mig || d->mig_mode) END(NVML_ERROR_NOT_SUPPORTED); /* no utilization on MIG */
    if (type != 1 && type != 2) END(NVML_ERROR_NOT_SUPPORTED); /* GPU and memory utilization only */
    if (!d->keeps_samples && !d->sample_period_ms) END(NVML_ERROR_NOT_SUPPORTED);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    take_samples(d);
    ring_t *r = type == 1 ? &d->util_ring : &d->mem_ring;
    int first = 0;
    while (first < r->n && r->s[(r->start + first) % RING].ts <= last_seen) first++;
    unsigned newer = (unsigned)(r->n - first);
    if (newer == 0) END(NVML_ERROR_NOT_FOUND);
    *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
    if (!samples) {
        *count = newer;
        END(NVML_SUCCESS);
    }
    unsigned n = newer < *count ? newer : *count;
    for (unsigned i = 0; i < n; i++) {
        sample_t *from = &r->s[(r->start + first + (int)i) % RING];
        memset(&samples[i], 0, sizeof samples[i]);
        samples[i].timeStamp = from->ts;
        samples[i].sampleValue.uiVal = from->value;
    }
    *count = n;
    END(NVML_SUCCESS);
}

/* ---- PCIe link, clocks, power, temperature -------------------------------------------------- */

#define GETTER(fn, type, expr)               \
    nvmlReturn_t fn(void *h, type *out) {    \
        BEGIN(#fn, h);                       \
        if (d->is_mig) END(NVML_ERROR_NOT_SUPPORTED); \
        *out = (expr);                       \
        END(NVML_SUCCESS);                   \
    }
GETTER(nvmlDeviceGetCurrPcieLinkGeneration, unsigned, d->pcie_gen)
GETTER(nvmlDeviceGetMaxPcieLinkGeneration, unsigned, d->pcie_gen_max)
GETTER(nvmlDeviceGetCurrPcieLinkWidth, unsigned, d->pcie_width)
GETTER(nvmlDeviceGetMaxPcieLinkWidth, unsigned, d->pcie_width_max)
GETTER(nvmlDeviceGetPowerUsage, unsigned, d->power_mw)
GETTER(nvmlDeviceGetEnforcedPowerLimit, unsigned, d->power_limit_mw)
GETTER(nvmlDeviceGetTotalEnergyConsumption, unsigned long long, d->energy_mj)
#if DRIVER_BRANCH >= 535
GETTER(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, d->clock_event_reasons)
#endif
GETTER(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long, d->clock_event_reasons)

nvmlReturn_t nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
    BEGIN("nvmlDeviceGetClockInfo", h);
    if (type == 1) *mhz = d->sm_clock_mhz; /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = d->memory_clock_mhz; /* NVML_CLOCK_MEM */
    else END(NVML_ERROR_NOT_SUPPORTED);
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz) {
    BEGIN("nvmlDeviceGetMaxClockInfo", h);
    if (type != 1) END(NVML_ERROR_NOT_SUPPORTED);
    *mhz = d->sm_clock_max_mhz;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetTemperature(void *h, int sensor, unsigned *celsius) {
    BEGIN("nvmlDeviceGetTemperature", h);
    if (sensor != 0) END(NVML_ERROR_NOT_SUPPORTED); /* NVML_TEMPERATURE_GPU */
    *celsius = d->temperature_c;
    END(NVML_SUCCESS);
}

/* ---- errors -------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *h, int error_type, int counter_type, unsigned long long *count) {
    BEGIN("nvmlDeviceGetTotalEccErrors", h);
    (void)counter_type;
    *count = error_type == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetRemappedRows(void *h, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failed) {
    BEGIN("nvmlDeviceGetRemappedRows", h);
    *corr = d->remapped_correctable;
    *unc = d->remapped_uncorrectable;
    *pending = d->remap_pending;
    *failed = d->remap_failure;
    END(NVML_SUCCESS);
}

/* ---- processes ----------------------------------------------------------------------------- */

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* Every version: `v1` fills nvmlProcessInfo_v1_t entries, the others nvmlProcessInfo_t. */
static nvmlReturn_t running_processes(const char *fn, void *h, unsigned *count, void *out, int v1) {
    BEGIN(fn, h);
    device_t *gpu = d->is_mig ? d->parent : d;
    unsigned n = 0;
    for (int i = 0; i < gpu->nproc; i++) {
        proc_t *p = &gpu->procs[i];
        if (d->is_mig && p->gi != d->gi) continue;
        if (out && n < *count && v1) {
            nvmlProcessInfo_v1_t *info = &((nvmlProcessInfo_v1_t *)out)[n];
            info->pid = p->pid;
            info->usedGpuMemory = p->memory;
        } else if (out && n < *count) {
            nvmlProcessInfo_t *info = &((nvmlProcessInfo_t *)out)[n];
            info->pid = p->pid;
            info->usedGpuMemory = p->memory;
            info->gpuInstanceId = gpu->mig_mode ? p->gi : 0xFFFFFFFFu;
            info->computeInstanceId = gpu->mig_mode ? 0 : 0xFFFFFFFFu;
        }
        n++;
    }
    nvmlReturn_t rc = n > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = n;
    END(rc);
}

#if DRIVER_BRANCH >= 510
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *count, nvmlProcessInfo_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", h, count, infos, 0);
}
#endif
#if DRIVER_BRANCH >= 470
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *h, unsigned *count, nvmlProcessInfo_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", h, count, infos, 0);
}
#endif
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void *h, unsigned *count, nvmlProcessInfo_v1_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses", h, count, infos, 1);
}

typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(void *h, nvmlProcessUtilizationSample_t *samples, unsigned *count,
                                             unsigned long long last_seen) {
    BEGIN("nvmlDeviceGetProcessUtilization", h);
    (void)last_seen;
    if (d->is_mig) END(NVML_ERROR_NOT_SUPPORTED);
    unsigned n = (unsigned)d->nproc;
    if (n == 0) END(NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) {
        *count = n;
        END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned long long ts = now_us();
    for (unsigned i = 0; i < n; i++) {
        samples[i].pid = d->procs[i].pid;
        samples[i].timeStamp = ts;
        samples[i].smUtil = d->procs[i].sm_util;
        samples[i].memUtil = samples[i].encUtil = samples[i].decUtil = 0;
    }
    *count = n;
    END(NVML_SUCCESS);
}

/* ---- topology ------------------------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *h1, void *h2, int *level) {
    BEGIN("nvmlDeviceGetTopologyCommonAncestor", h1);
    device_t *other = (device_t *)h2;
    if (!other || d->is_mig || other->is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    if (topology[d->index][other->index] < 0) END(NVML_ERROR_NOT_SUPPORTED);
    *level = topology[d->index][other->index];
    END(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetP2PStatus(void *h1, void *h2, unsigned index, unsigned *status) {
    BEGIN("nvmlDeviceGetP2PStatus", h1);
    device_t *other = (device_t *)h2;
    if (!other || !status || d->is_mig || other->is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    const char *path = p2p[d->index][other->index];
    if (!path[0]) END(NVML_ERROR_NOT_SUPPORTED);
    /* NVML_P2P_CAPS_INDEX_NVLINK (2): OK over NVLink only; READ (0) and the rest: OK over NVLink or PCIe.
       Otherwise NVML_P2P_STATUS_NOT_SUPPORTED (5) or CHIPSET_NOT_SUPPORTED (1), as drivers answer. */
    if (index == 2) *status = strcmp(path, "nvlink") == 0 ? 0 : 5;
    else *status = strcmp(path, "none") == 0 ? 1 : 0;
    END(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned link, unsigned *active) {
    BEGIN("nvmlDeviceGetNvLinkState", h);
    char name[16];
    if (d->is_mig || !active) END(NVML_ERROR_INVALID_ARGUMENT);
    if (link >= d->nvlink_links) END(NVML_ERROR_INVALID_ARGUMENT);
    snprintf(name, sizeof name, "%u", link);
    *active = listed(d->nvlink_down, name) ? 0 : 1; /* NVML_FEATURE_ENABLED / _DISABLED */
    END(NVML_SUCCESS);
}

/* ---- events (XID) -------------------------------------------------------------------------- */

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {
    device_t *devices[MAX_GPUS];
    int delivered[MAX_GPUS];
    int n;
} event_set_t;

nvmlReturn_t nvmlEventSetCreate(void **set) {
    *set = calloc(1, sizeof(event_set_t));
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlEventSetFree(void *set) {
    free(set);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) {
    BEGIN("nvmlDeviceRegisterEvents", h);
    event_set_t *es = set;
    if (!(types & 0x8ULL) || es->n >= MAX_GPUS) END(NVML_ERROR_NOT_SUPPORTED);
    es->devices[es->n] = d;
    es->delivered[es->n] = d->nxid; /* only errors raised after registration are events */
    es->n++;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned timeout_ms) {
    event_set_t *es = set;
    unsigned long long deadline = now_us() + (unsigned long long)timeout_ms * 1000ULL;
    for (;;) {
        pthread_mutex_lock(&mu);
        refresh();
        for (int i = 0; i < es->n; i++) {
            device_t *d = es->devices[i];
            if (es->delivered[i] > d->nxid) es->delivered[i] = d->nxid; /* the test rewound the list */
            if (es->delivered[i] < d->nxid) {
                data->device = d;
                data->eventType = 0x8ULL; /* nvmlEventTypeXidCriticalError */
                data->eventData = d->xids[es->delivered[i]++];
                data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
                END(NVML_SUCCESS);
            }
        }
        pthread_mutex_unlock(&mu);
        if (now_us() >= deadline) return NVML_ERROR_TIMEOUT;
        usleep(5000);
    }
}

/* ---- GPM (Hopper+) ------------------------------------------------------------------------- */

#if DRIVER_BRANCH >= 520 /* to the end of the file */

typedef struct {
    device_t *device;
    double values[MAX_GPM];
    int set[MAX_GPM];
} gpm_sample_t;

typedef struct {
    unsigned version, isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName, *longName, *unit;
    } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned version, numMetrics;
    gpm_sample_t *sample1, *sample2;
    nvmlGpmMetric_t metrics[1]; /* the caller allocates NVML_GPM_METRIC_MAX of them */
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, nvmlGpmSupport_t *support) {
    BEGIN("nvmlGpmQueryDeviceSupport", h);
    support->isSupportedDevice = d->gpm;
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmSampleAlloc(void **sample) {
    *sample = calloc(1, sizeof(gpm_sample_t));
    return *sample ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlGpmSampleFree(void *sample) {
    free(sample);
    return NVML_SUCCESS;
}
static void snapshot_gpm(device_t *d, gpm_sample_t *s) {
    s->device = d;
    memcpy(s->values, d->gpm_values, sizeof s->values);
    memcpy(s->set, d->gpm_set, sizeof s->set);
}
nvmlReturn_t nvmlGpmSampleGet(void *h, gpm_sample_t *sample) {
    BEGIN("nvmlGpmSampleGet", h);
    if (!d->gpm) END(NVML_ERROR_NOT_SUPPORTED);
    snapshot_gpm(d, sample);
    END(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmMigSampleGet(void *h, unsigned gi, gpm_sample_t *sample) {
    BEGIN("nvmlGpmMigSampleGet", h);
    if (!d->gpm) END(NVML_ERROR_NOT_SUPPORTED);
    for (int i = 0; i < MAX_MIG; i++) {
        device_t *mig = &migs[d->index][i];
        if (mig->exists && mig->gi == gi) {
            snapshot_gpm(mig, sample);
            END(NVML_SUCCESS);
        }
    }
    END(NVML_ERROR_NOT_FOUND);
}
/* Real GPM computes each metric over the interval between the two samples; the fake reports the
 * state the second sample saw, which is what a test that sets a steady value expects. */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    if (!request || !request->sample1 || !request->sample2) return NVML_ERROR_INVALID_ARGUMENT;
    gpm_sample_t *s = request->sample2;
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        unsigned id = metric->metricId;
        if (id < MAX_GPM && s->set[id]) {
            metric->value = s->values[id];
            metric->nvmlReturn = NVML_SUCCESS;
        } else {
            metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
#endif
