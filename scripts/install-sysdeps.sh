#!/usr/bin/env bash
# Installs the system packages the tests use, where missing: redis-server (the remote KV tier is
# tested against a real Redis), chromium (the bench report is loaded in headless Chromium), and
# Debian's python3-fastapi, python3-httpx and python3-uvicorn (vLLM's disaggregation proxy, from
# ../shared/peers, runs on Debian's own python3 in front of a prefill/decode pair), and Debian's
# python3-zmq and python3-msgpack (a replica's vLLM-format KV events are decoded from outside Go).
# Needs root or sudo for apt-get; does nothing when everything is present.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
/usr/bin/python3 -c 'import fastapi, httpx, uvicorn' >/dev/null 2>&1 || need+=(python3-fastapi python3-httpx python3-uvicorn)
command -v promtool >/dev/null 2>&1 || need+=(prometheus) # promtool checks and tests deploy/alerts
/usr/bin/python3 -c 'import zmq, msgpack' >/dev/null 2>&1 || need+=(python3-zmq python3-msgpack)
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-sysdeps: installing ${need[*]} with apt-get"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
