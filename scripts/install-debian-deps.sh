#!/usr/bin/env bash
# Install the Debian packages hpcprof's real local SLURM cluster needs (tests/slurm, make slurm-up):
# SLURM 22.05 (controller, node daemon, client, accounting daemon + MySQL plugin), munge,
# MariaDB (server and client, -core packages only), shellcheck (template lint tests) and chromium
# (headless screenshots and DOM checks of report.html, tests/analysis/test_report_browser.py).
#
# Idempotent: when every package is already installed it exits at once without touching apt.
# Runs non-interactively as root. As a non-root user it prints what is missing and exits 0,
# so CI scripts can call it unconditionally (the SLURM tests then skip with the reason).
#
# Usage: scripts/install-debian-deps.sh
set -euo pipefail

packages=(
  slurmctld slurmd slurm-client munge
  slurmdbd slurm-wlm-mysql-plugin mariadb-server-core mariadb-client-core
  shellcheck
  chromium
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-debian-deps: dpkg-query not found; not a Debian-like system, nothing installed." >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [ "$status" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-debian-deps: all ${#packages[@]} packages already installed."
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-debian-deps: not root; missing packages not installed: ${missing[*]}" >&2
  echo "install-debian-deps: run as root (or: sudo $0); SLURM tests will skip without them." >&2
  exit 0
fi

echo "install-debian-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-debian-deps: done."
