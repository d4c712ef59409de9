#!/usr/bin/env bash
# A pre-commit guard (install: ln -s ../../scripts/check_commit_size.sh .git/hooks/pre-commit):
# refuses a commit that stages a file over 2 MiB or more than 20 MiB in all. A submission over
# 512 MiB packed is refused whole; generated data (venvs, databases, browser profiles, bench
# output) belongs in .gitignore, not in a commit.
set -euo pipefail
total=0
while IFS= read -r -d '' path; do
  size=$(git cat-file -s ":$path" 2>/dev/null || echo 0)
  if [ "$size" -gt 2097152 ]; then
    echo "refused: $path is $size bytes (over 2 MiB): generated data stays out of the repository" >&2
    exit 1
  fi
  total=$((total + size))
done < <(git diff --cached --name-only -z --diff-filter=AM)
if [ "$total" -gt 20971520 ]; then
  echo "refused: this commit stages $total bytes (over 20 MiB)" >&2
  exit 1
fi
