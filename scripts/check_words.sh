#!/usr/bin/env bash
# The tree speaks of the project only. Fails, naming FILE:LINE and the words, where a tracked text file holds
#
# 1. A path of a build machine (`paths` below): a workspace or a user's home folder at the file system's root, or a
#    named folder in the system's temporary folder. Allowed: a `mktemp` template (six X or more, on a line that
#    calls mktemp) and anything under `${TMPDIR:-/tmp}` (that reads `/tmp}`, so it never matches). A script's default
#    scratch folder is `$(mktemp -d)` or `${TMPDIR:-/tmp}/loadshape-NAME`; a command in the docs names its folder
#    with a placeholder (`OUT=DIR`, `OLD_WORKTREE`) or `$(mktemp -d)`.
# 2. Narration of how the work was organised, rather than of the product (`narration` below): a working session
#    named by its number (numbers 3 and up: 0–2 are the indices tests give a workload's sessions, and the domain's
#    other uses, `sessions`, `--sessions 8`, `session_id`, "a session workload", never match), the current or an
#    earlier working session, a working sitting (but "a request sitting in the queue" passes), and who did the
#    work (the lead, helpers) rather than what the project does.
#    A measurement is identified by its date (UTC time where given), commit and conditions instead.
#
# Usage: bash scripts/check_words.sh [PATHSPEC...]   (default: every tracked file; git pathspecs, e.g. ':!README.md')
# Binary files are skipped (git grep -I); this script is left out, since it names the patterns.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

self=scripts/check_words.sh
if (($#)); then specs=("$@"); else specs=(.); fi
specs+=(":(exclude)$self")

paths='/work/|/root/|/Users/[A-Za-z]|/home/[A-Za-z_]|/tmp/[A-Za-z0-9_.-]'
narration='\b[Ss]ession ([3-9]|[1-9][0-9]+)\b|\b[Tt]his session\b|\b[Ii]n earlier sessions\b|\b[Aa]n earlier session\b'
narration+='|\b([Tt]his|[Tt]hat|[Aa]|[Tt]he|[Ee]ach|[Oo]ne|[Nn]umbered|[Ww]orking'
narration+='|[Ee]arlier|[Pp]revious|[Nn]ext|[Ll]ater) sitting\b'
narration+='|\b[Ss]ittings\b|\b[Tt]he lead\b(?! time)|\blead'"'"'s\b'
narration+='|\bhelpers'"'"' builds\b|\bother helpers (compiling|building|running)\b'

# A /tmp/ path is allowed where it is a mktemp template: drop those tokens before looking again.
strip_mktemp() { sed -E '/mktemp/ s#/tmp/[A-Za-z0-9_./-]*XXXXXX[X]*##g'; }

bad=0
while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
  cleaned=$(printf '%s\n' "$text" | strip_mktemp)
  if printf '%s\n' "$cleaned" | grep -qE "$paths"; then
    what=$(printf '%s\n' "$cleaned" | grep -oE "($paths)[^ \"'\`)]*" | head -3 | paste -sd' ' -)
    echo "$file:$line: build-machine path: $what"
    bad=1
  fi
done < <(git grep -nIE "$paths" -- "${specs[@]}" || true)

while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
  what=$(printf '%s\n' "$text" | grep -oP "$narration" | head -3 | paste -sd',' -)
  echo "$file:$line: narration of the work: $what"
  bad=1
done < <(git grep -nIP "$narration" -- "${specs[@]}" || true)

if ((bad)); then
  echo "check_words: the lines above name a build machine's paths or narrate how the work was organised" >&2
  exit 1
fi
echo "check_words: ok"
