#!/bin/sh
# Messages for users name no C functions of ours: no string literal in src/, kernels/ or
# tools/ starts with an sl_ name ("sl_transport_send: ...", or a name handed on as a
# prefix). Messages say what failed in the user's words: "transport: ...", the key.
# A symbol's name for dlsym (#define SL_..._SYMBOL "sl_...") is no message.
# Usage: check_messages.sh [SRCDIR]   (default $SHOAL_SRCDIR, else the current directory)
top=${1:-${SHOAL_SRCDIR:-.}}
cd "$top" || { echo "check_messages: $top: no such directory" >&2; exit 99; }
[ -d src ] || { echo "check_messages: no src/ under $top" >&2; exit 99; }
bad=$(grep -rnE '"sl_[a-z0-9_]+' src kernels tools --include='*.c' --include='*.h' --include='*.cu' |
    grep -vE '#define SL_[A-Z0-9_]+_SYMBOL "sl_[a-z0-9_]+"$')
if [ -n "$bad" ]; then
    echo "check_messages: C names in messages (say what failed in the user's words):"
    echo "$bad"
    echo "0%: Checks: 1, Failures: 1, Errors: 0"
    exit 1
fi
echo "100%: Checks: 1, Failures: 0, Errors: 0"
