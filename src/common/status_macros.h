#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// RETURN_IF_ERROR(expr): returns the absl::Status of expr from the enclosing function when it
// is not OK.
#define GRANARY_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::absl::Status _granary_st = (expr);       \
    if (!_granary_st.ok()) return _granary_st; \
  } while (0)

#define GRANARY_CONCAT_INNER(a, b) a##b
#define GRANARY_CONCAT(a, b) GRANARY_CONCAT_INNER(a, b)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the absl::StatusOr expr; on error returns its status,
// otherwise moves the value into lhs (which may be a declaration).
#define GRANARY_ASSIGN_OR_RETURN(lhs, expr) \
  GRANARY_ASSIGN_OR_RETURN_IMPL(GRANARY_CONCAT(_granary_sor_, __LINE__), lhs, expr)
#define GRANARY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
