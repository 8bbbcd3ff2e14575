#!/usr/bin/env bash
# System programs some tests use: a real Prometheus server (remote telemetry tests),
# Chromium (the report is opened in a headless browser) and nginx (a reverse proxy in front
# of the testbed, tests/live/test_proxy_live.py). Installed with apt-get when we are
# root on a Debian-like machine; otherwise say what is missing (those tests then skip with
# the reason locally, and fail under K3ACCEPT_LIVE_REQUIRED=1 as in CI).
set -u
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: installing ${missing[*]} with apt-get" >&2
    apt-get update -qq >/dev/null && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || echo "system-deps: apt-get failed for ${missing[*]}" >&2
else
    echo "system-deps: missing ${missing[*]} (install them to run every live test)" >&2
fi
exit 0
