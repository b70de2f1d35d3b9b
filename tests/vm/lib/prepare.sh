# shellcheck shell=bash
# shellcheck disable=SC2034  # VM_* variables are read by the sourcing script (tests/vm/run)
# Host-side preparation of the Soft-RoCE VM lane, sourced by tests/vm/run.
#   vm_install_packages   install the Debian packages the lane needs (only what is missing)
#   vm_fetch_kernel       download + unpack (never install) a Debian kernel that ships rdma_rxe
#   vm_build_initramfs    build the guest initramfs, cached by a hash of its inputs
# Everything lands under $VM_CACHE (default /var/cache/hipobj-vm). Callers hold $VM_CACHE/.lock.

# Packages on the host. The guest runs the host's own userland through a 9p mount of /, so the
# RDMA userland (libibverbs + rxe provider, ibverbs-utils, perftest) must be installed here.
VM_PACKAGES=(qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils libibverbs-dev perftest rdmacm-utils
             busybox-static cpio iproute2 kmod gzip xz-utils)

# Kernel modules the guest loads (their dependencies are resolved with modprobe --show-depends).
# crc32_generic: rxe asks the crypto API for "crc32" (RoCE ICRC); it is a crypto alias, not a module
# dependency, so it must be shipped explicitly (and the generic one is faster than pclmul under TCG).
VM_MODULES=(virtio_pci virtio_console 9pnet_virtio 9p ib_core ib_uverbs rdma_ucm rdma_rxe veth dummy
            crc32_generic)

vm_log() { printf 'hipobj-vm: %s\n' "$*" >&2; }
vm_info() { [ "${VM_QUIET:-0}" = 1 ] || vm_log "$@"; }   # progress lines (silenced by --quiet)
vm_die() { printf 'hipobj-vm: error: %s\n' "$*" >&2; exit 125; }

VM_APT_UPDATED=0
vm_apt_update() {
  [ "$VM_APT_UPDATED" = 1 ] && return 0
  vm_info "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || vm_die "apt-get update failed"
  VM_APT_UPDATED=1
}

vm_install_packages() {
  local missing=() p
  for p in "${VM_PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
  done
  [ ${#missing[@]} = 0 ] && return 0
  [ "$(id -u)" = 0 ] || vm_die "missing packages (${missing[*]}); run once as root to install them"
  vm_apt_update
  vm_info "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || vm_die "apt-get install ${missing[*]} failed"
}

# The kernel of a boot with two rails (VM_RAILS >= 2): Debian's 6.12 from bookworm-security, not
# Debian 12's default 6.1, whose rxe livelocks inside ibv_post_send under load on two devices (2 of
# 13 runs of e2e.d/55-rails on 2026-12-05, 0 of 10 on 6.12: tests/vm/README.md). Pinned, so that
# CI does not change kernel under us.
VM_RAILS_KERNEL_PKG=linux-image-6.12.117+deb12-amd64

# Which kernel package: HIPOBJ_VM_KERNEL_PKG, else VM_RAILS_KERNEL_PKG for two rails, else the one
# cached before (no apt traffic on warm runs), else the dependency of the linux-image-amd64
# metapackage. The 'cloud-amd64' flavour has no drivers/infiniband/sw, so it is never used.
vm_resolve_kernel_pkg() {
  if [ -n "${HIPOBJ_VM_KERNEL_PKG:-}" ]; then echo "$HIPOBJ_VM_KERNEL_PKG"; return; fi
  if [ "${VM_RAILS:-1}" -ge 2 ]; then echo "$VM_RAILS_KERNEL_PKG"; return; fi
  if [ "${VM_REFRESH:-0}" != 1 ] && [ -s "$VM_CACHE/kernel/current" ]; then cat "$VM_CACHE/kernel/current"; return; fi
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$pkg" ]; then
    vm_apt_update
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$pkg" ] || vm_die "cannot resolve the kernel package behind linux-image-amd64"
  echo "$pkg"
}

# Sets VM_KVER and VM_KDIR (unpacked kernel tree with modules.dep).
vm_fetch_kernel() {
  local pkg tmp
  pkg=$(vm_resolve_kernel_pkg)
  VM_KVER=${pkg#linux-image-}
  VM_KDIR=$VM_CACHE/kernel/$VM_KVER
  if [ ! -f "$VM_KDIR/boot/vmlinuz-$VM_KVER" ] || [ ! -f "$VM_KDIR/lib/modules/$VM_KVER/modules.dep" ]; then
    vm_info "fetching guest kernel $pkg (apt-get download, not installed on the host)"
    tmp=$(mktemp -d "$VM_CACHE/kernel/.fetch.XXXXXX")
    # -o APT::Sandbox::User=root: the _apt user cannot write into this root-owned directory
    if ! (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2); then
      vm_apt_update
      (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2) || { rm -rf "$tmp"; vm_die "apt-get download $pkg failed"; }
    fi
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/tree" || { rm -rf "$tmp"; vm_die "dpkg-deb -x failed"; }
    # the .deb ships no modules.dep (its postinst would generate it)
    depmod -b "$tmp/tree" "$VM_KVER" || { rm -rf "$tmp"; vm_die "depmod failed"; }
    [ -f "$tmp/tree/lib/modules/$VM_KVER/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ] ||
      ls "$tmp/tree/lib/modules/$VM_KVER/kernel/drivers/infiniband/sw/rxe/"rdma_rxe.ko* >/dev/null 2>&1 ||
      { rm -rf "$tmp"; vm_die "$pkg ships no rdma_rxe module"; }
    rm -rf "$VM_KDIR"
    mv "$tmp/tree" "$VM_KDIR"
    rm -rf "$tmp"
  fi
  # Remembered only when resolved by default: a run with HIPOBJ_VM_KERNEL_PKG (another kernel for
  # one measurement) or two rails leaves the next plain run on the default kernel.
  [ -n "${HIPOBJ_VM_KERNEL_PKG:-}" ] || [ "${VM_RAILS:-1}" -ge 2 ] || echo "$pkg" > "$VM_CACHE/kernel/current"
  vm_pick_boot_image
}

# Sets VM_BOOT_IMAGE. Debian's bzImage is xz-compressed, and decompressing it under TCG costs about
# 5 s per boot (measured: 10.4 s -> 5.4 s QEMU start to init). The kernel has CONFIG_PVH, so QEMU
# can boot the uncompressed ELF vmlinux directly through its PVH entry: unpack it once here.
vm_pick_boot_image() {
  local bz=$VM_KDIR/boot/vmlinuz-$VM_KVER elf=$VM_KDIR/vmlinux-$VM_KVER off
  VM_BOOT_IMAGE=$bz
  grep -qx 'CONFIG_PVH=y' "$VM_KDIR/boot/config-$VM_KVER" 2>/dev/null || return 0
  if [ ! -s "$elf" ]; then
    # the payload is the first xz stream in the bzImage
    off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$bz" | head -1 | cut -d: -f1)
    [ -n "$off" ] || return 0
    tail -c +$((off + 1)) "$bz" | xz -dc --single-stream > "$elf.tmp" 2>/dev/null
    if [ "$(head -c 4 "$elf.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then mv "$elf.tmp" "$elf"
    else rm -f "$elf.tmp"; return 0; fi
  fi
  VM_BOOT_IMAGE=$elf
}

# Sets VM_INITRAMFS. Inputs hashed: this file, guest/init, the kernel version and the versions of
# the host packages copied into the image.
vm_build_initramfs() {
  local hash root md m ko rel a lib
  hash=$( { cat "$VM_HERE/lib/prepare.sh" "$VM_HERE/guest/init"; echo "$VM_KVER";
            dpkg-query -W -f='${Package}=${Version}\n' busybox-static kmod libc6 2>/dev/null; } |
          sha256sum | cut -c1-16)
  VM_INITRAMFS=$VM_CACHE/initramfs-$VM_KVER-$hash.cpio.gz
  [ -s "$VM_INITRAMFS" ] && return 0
  vm_info "building initramfs ($VM_KVER, inputs $hash)"
  root=$(mktemp -d "$VM_CACHE/.rootfs.XXXXXX")
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,etc,proc,sys,dev,tmp,run,host}
  for a in bin sbin lib lib64; do ln -s "usr/$a" "$root/$a"; done
  mkdir -p "$root/usr/lib64"

  # ELF + the libraries it needs, at the paths the loader looks them up (the loader itself has no
  # '=>' in ldd's output)
  vm_copy_file() { [ -e "$root$1" ] && return 0; mkdir -p "$root$(dirname "$1")"; cp -L "$1" "$root$1"; }
  vm_copy_elf() {
    vm_copy_file "$1"
    ldd "$1" 2>/dev/null | awk '/=> \//{print $3} $1 ~ /^\/.*ld-linux/{print $1}' |
      while read -r lib; do vm_copy_file "$lib"; done
  }
  # kmod: the kernel's module autoloader execs /sbin/modprobe inside the initramfs root
  local kmod_bin
  kmod_bin=$(readlink -f "$(command -v kmod)") || vm_die "kmod not found"
  vm_copy_elf "$kmod_bin"
  for a in modprobe insmod rmmod lsmod depmod modinfo; do ln -sf "$kmod_bin" "$root/usr/sbin/$a"; done
  # busybox for the rest (applets only where no real binary exists)
  cp /bin/busybox "$root/usr/bin/busybox"
  for a in $("$root/usr/bin/busybox" --list); do
    [ -e "$root/usr/bin/$a" ] || [ -e "$root/usr/sbin/$a" ] || ln -s busybox "$root/usr/bin/$a"
  done
  echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
  echo "root:x:0:" > "$root/etc/group"

  md=$root/lib/modules/$VM_KVER
  mkdir -p "$md"
  cp "$VM_KDIR/lib/modules/$VM_KVER"/modules.{order,builtin,builtin.modinfo} "$md/" 2>/dev/null || true
  for m in "${VM_MODULES[@]}"; do
    modprobe -d "$VM_KDIR" -S "$VM_KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}' ||
      vm_die "module $m not found in $VM_KVER"
  done | sort -u | while read -r ko; do
    rel=${ko#"$VM_KDIR"}; mkdir -p "$root$(dirname "$rel")"; cp "$ko" "$root$rel"
  done
  # compressed modules (newer Debian kernels): decompress so no xz/zstd support is needed
  find "$md" -name '*.ko.xz' -exec xz -d {} + 2>/dev/null
  find "$md" -name '*.ko.zst' -exec zstd -q -d --rm {} + 2>/dev/null
  depmod -b "$root" "$VM_KVER" || vm_die "depmod for the initramfs failed"

  install -m 0755 "$VM_HERE/guest/init" "$root/init"
  (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$VM_INITRAMFS.tmp" ||
    vm_die "packing the initramfs failed"
  mv "$VM_INITRAMFS.tmp" "$VM_INITRAMFS"
  rm -rf "$root"
  # drop images built from older inputs
  find "$VM_CACHE" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -path "$VM_INITRAMFS" -delete
  vm_info "initramfs: $VM_INITRAMFS ($(du -h "$VM_INITRAMFS" | cut -f1))"
}
