#!/bin/bash
# Verifier for lock-private-keys: files under /app/keys holding a private key are mode 600, the rest readable by all; /app/locked.txt lists them
# Checks content with python3 only and always writes /logs/verifier/reward.txt (1 or 0).
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys
from pathlib import Path

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

def read(path):
    p = Path(path)
    if not p.is_file():
        fail(f"{path} does not exist or is not a regular file")
    return p.read_text(errors="replace")

files = {'deploy_ed25519': ('-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n', True), 'deploy_ed25519.pub': ('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOvB deploy@ci\n', False), 'backup_rsa': ('-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n-----END RSA PRIVATE KEY-----\n', True), 'backup_rsa.pub': ('ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 backup@nas\n', False), 'tls/server.key': ('-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIB\n-----END PRIVATE KEY-----\n', True), 'tls/server.crt': ('-----BEGIN CERTIFICATE-----\nMIIDazCCAlOgAwIBAgIUJ0xN\n-----END CERTIFICATE-----\n', False), 'README.txt': ('Private keys stay on this host. Never copy them to a shared drive.\n', False)}

for name, (text, private) in files.items():
    p = Path("/app/keys") / name
    if read(p) != text:
        fail(f"{p} was changed")
    mode = p.stat().st_mode & 0o777
    if private and mode != 0o600:
        fail(f"{p} holds a private key but its mode is {oct(mode)}, expected 0o600")
    if not private and (mode & 0o444) != 0o444:
        fail(f"{p} is not a private key and should stay readable by everyone; its mode is {oct(mode)}")
want = sorted(f"/app/keys/{n}" for n, (_, k) in files.items() if k)
got = read("/app/locked.txt").split()
if got != want:
    fail(f"/app/locked.txt lists {got!r}, expected {want!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
