/* verbs-devices: list the RDMA verbs devices with libibverbs, query port 1 of each, and register
 * a 1 MiB malloc'd buffer on each. Built on the host by tests/vm/e2e and run in the Soft-RoCE guest
 * to show that host-built binaries work there unchanged.
 * Exit 0 only when at least one device exists and every device has an ACTIVE port 1 on which the
 * memory registration succeeds. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REG_BYTES (1u << 20)

static int check_device(struct ibv_device *dev)
{
	const char *name = ibv_get_device_name(dev);
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_port_attr port;
	struct ibv_device_attr attr;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	void *buf = NULL;
	int ok = 0;

	if (!ctx) {
		fprintf(stderr, "%s: ibv_open_device failed\n", name);
		return 0;
	}
	if (ibv_query_device(ctx, &attr) || ibv_query_port(ctx, 1, &port)) {
		fprintf(stderr, "%s: query failed\n", name);
		goto out;
	}
	printf("%s: port 1 %s, active_mtu %d, link_layer %s, max_qp %d, max_mr_size 0x%llx\n", name,
	       ibv_port_state_str(port.state), 128 << port.active_mtu,
	       port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand", attr.max_qp,
	       (unsigned long long)attr.max_mr_size);
	if (port.state != IBV_PORT_ACTIVE)
		goto out;
	pd = ibv_alloc_pd(ctx);
	buf = malloc(REG_BYTES);
	if (!pd || !buf) {
		fprintf(stderr, "%s: ibv_alloc_pd or malloc failed\n", name);
		goto out;
	}
	memset(buf, 0x5a, REG_BYTES);
	mr = ibv_reg_mr(pd, buf, REG_BYTES,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr) {
		perror("ibv_reg_mr");
		goto out;
	}
	printf("%s: registered %u bytes, lkey 0x%x rkey 0x%x\n", name, REG_BYTES, mr->lkey, mr->rkey);
	ok = 1;
out:
	if (mr)
		ibv_dereg_mr(mr);
	if (pd)
		ibv_dealloc_pd(pd);
	free(buf);
	ibv_close_device(ctx);
	return ok;
}

int main(void)
{
	int n = 0, good = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list) {
		perror("ibv_get_device_list");
		return 1;
	}
	for (int i = 0; i < n; i++)
		good += check_device(list[i]);
	ibv_free_device_list(list);
	printf("%d device(s), %d usable\n", n, good);
	return (n > 0 && good == n) ? 0 : 1;
}
