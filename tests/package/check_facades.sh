#!/bin/sh
# The public classes that a transport implements (Connection, CompletionQueue, Context, Listener, and
# MemoryRegion beside them) are facades: their installed headers carry no transport hook and no internal
# state (issue 25; docs/architecture.md, "The seam"). The hooks and state live in src/transport/provider.hpp.
# C++ cannot check "no virtual function but the destructor" at compile time, so this reads the headers:
# it fails on a virtual function other than a destructor, a protected section, a mutex, an atomic, a
# container of internal state, or a detail:: name other than the provider that is the class's only friend.
# The sizes of the classes are checked at compile time by tests/unit/facade_test.cpp.
#   check_facades.sh <source dir>
set -u
include=${1:?usage: check_facades.sh <source dir>}/include/rdmakit
status=0
for header in connection.hpp completion.hpp context.hpp memory.hpp; do
  file=$include/$header
  [ -f "$file" ] || { echo "check_facades: $file is missing" >&2; status=1; continue; }
  # Comments do not count: strip // comments first.
  found=$(sed 's|//.*$||' "$file" | grep -nE \
    'virtual +[^~ ]|protected:|std::(mutex|shared_mutex|atomic|deque|vector<std::shared_ptr)|#include <(mutex|atomic|deque|shared_mutex)>|detail::' |
    grep -vE '^[0-9]+: *friend class detail::[A-Za-z]+Provider;$')
  if [ -n "$found" ]; then
    echo "check_facades: $header carries a hook or internal state (move it to src/transport/provider.hpp):" >&2
    echo "$found" | sed "s|^|  $header:|" >&2
    status=1
  fi
done
# No installed header at all holds a lock or shared state: a class with state of its own keeps it behind an
# opaque pointer to a detail:: type (fault::Injector's rule book).
for file in $(find "$include" -name '*.hpp' | sort); do
  found=$(sed 's|//.*$||' "$file" | grep -nE 'std::(mutex|shared_mutex|atomic|deque|condition_variable)|#include <(mutex|atomic|deque|shared_mutex|condition_variable)>')
  if [ -n "$found" ]; then
    echo "check_facades: ${file#$include/} holds a lock or shared state in an installed header:" >&2
    echo "$found" | sed "s|^|  ${file#$include/}:|" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "check_facades: connection, completion, context and memory headers are facades; no header holds a lock"
exit $status
