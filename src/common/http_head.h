#pragma once

// The checks the HTTP gate (http_server.h) makes on a request's head, the request line and
// headers up to the blank line, before it reads a body or lets a worker see the request. Pure
// functions on bytes: no I/O, no state, thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace granary::http {

// What a head says, or why the request is refused.
struct HeadCheck {
  // 0: acceptable. Otherwise the status to refuse with: 400 (malformed request line, a
  // Content-Length that is not one byte count), 411 (a body method without Content-Length, or
  // any Transfer-Encoding), 413 (a Content-Length above the body limit).
  int status = 0;
  std::string reason;   // when refused: the metric label (bad_request, no_length, body_too_large)
  std::string message;  // when refused: what was wrong, with the value (escaped), for the reply
  std::string method;
  std::string target;       // as sent, query included
  uint64_t body_bytes = 0;  // Content-Length, 0 when absent
  // An "Expect: 100-continue" line: [expect_begin, expect_end) in the head, CRLF included.
  // The gate answers 100 itself and drops the line, so the server behind it does not answer
  // a second time.
  size_t expect_begin = 0, expect_end = 0;
};

// The length of the head in `bytes` (through the blank line "\r\n\r\n"), or 0 while it is not
// complete. `scanned`: how many bytes an earlier call already looked at (the search resumes
// just before them).
size_t FindHeadEnd(absl::string_view bytes, size_t scanned = 0);

// Checks a complete head (FindHeadEnd's bytes) against `max_body_bytes`.
HeadCheck CheckHead(absl::string_view head, uint64_t max_body_bytes);

}  // namespace granary::http
