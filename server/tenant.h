/* tenant.h - who a request is for, as the scheduler sees it: its fair-share queue (slot), its weight
 * and its class. The keys file (--keys) names tenants and gives each its share and priority; a request
 * carries the class its key resolved to from admission to its answer. Without --keys every request is
 * slot 0, share 1, interactive: one queue, today's order. */
#ifndef ADAPTERD_SERVER_TENANT_H
#define ADAPTERD_SERVER_TENANT_H

/* Tenants a keys file may name; slot 0 is the caller with no tenant (no --keys, or the operator's
 * --admin-token). Bounds the scheduler's queues and the per-tenant metrics' cardinality. */
#define SRV_TENANTS_MAX 256

typedef enum {
    SRV_PRIO_INTERACTIVE = 0, /* the default: served first, refused last */
    SRV_PRIO_BATCH = 1,       /* served after every waiting interactive job; refused and skipped first under load */
} srv_priority;

typedef struct srv_tenant_class {
    int slot;                 /* 0..SRV_TENANTS_MAX-1, stable for a tenant's name while the server runs */
    double share;             /* weighted fair queuing weight (1 by default; a job built by hand has 0: read as 1) */
    srv_priority priority;
} srv_tenant_class;

#define SRV_TENANT_CLASS_DEFAULT ((srv_tenant_class){.slot = 0, .share = 1.0, .priority = SRV_PRIO_INTERACTIVE})

#endif
