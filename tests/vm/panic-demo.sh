#!/bin/bash
# Demonstration: tests/vm/e2e's one extra boot after a guest kernel panic.
# A copy of tests/vm whose e2e.d holds two stages: 10-panic crashes the guest kernel (sysrq c)
# on the first boot only (MODE=once) or on every boot (MODE=always); 20-ok passes.
set -u
REPO=${1:?repo}; MODE=${2:?once|always}
D=$REPO/tests/vm-panic-demo
rm -rf "$D"; cp -a "$REPO/tests/vm" "$D"; rm -f "$D"/e2e.d/*
cat > "$D/e2e.d/10-panic" <<EOS
#!/bin/bash
if [ "$MODE" = always ] || [ -z "\${HIPOBJ_E2E_FROM:-}" ]; then echo "10-panic: crashing the guest kernel"; sync; echo c > /proc/sysrq-trigger; sleep 30; fi
echo "10-panic: second boot, nothing to do"
EOS
printf '#!/bin/sh\necho "20-ok: ran"\n' > "$D/e2e.d/20-ok"
chmod +x "$D"/e2e.d/*
cd "$REPO" && HIPOBJ_E2E_SIZES=65536 flock /tmp/hipobj-lane.lock "$D/e2e" --timeout 600
rc=$?
rm -rf "$D"
echo "panic-demo ($MODE): tests/vm/e2e exit $rc"
