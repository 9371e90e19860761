// C++ exceptions on threads that may find no memory. libstdc++ keeps each thread's exception
// globals (__cxa_get_globals) in thread-local storage that glibc allocates lazily, at the
// thread's first throw or catch; when malloc fails there glibc ends the process ("cannot
// allocate memory for thread-local data: ABORT"), so the first std::bad_alloc of a thread
// that starts after memory ran out would kill it instead of being caught.
#pragma once

namespace pytimings {

// True once this thread's exception globals exist (from then on a throw needs no TLS
// allocation); false, without allocating them, when no memory is left to make them now.
// Call it before the first try block a thread runs in the recorder. Never throws.
bool exceptions_ready() noexcept;

}  // namespace pytimings
