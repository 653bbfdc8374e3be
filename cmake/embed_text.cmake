# Writes a C++ source that holds a text file as a raw string literal, for assets the binaries
# serve (the master's dashboard). Run as a build step, so the .cc is regenerated whenever the
# text changes:
#   cmake -DINPUT=in.html -DOUTPUT=out.cc -DSYMBOL=kName -DNAMESPACE=granary::x -P embed_text.cmake
# The literal's delimiter must not occur in the text; a text that holds it is refused.
foreach(_v INPUT OUTPUT SYMBOL NAMESPACE)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "embed_text.cmake: -D${_v}=... is required")
  endif()
endforeach()
set(_delim "granary_embed")
file(READ "${INPUT}" _text)
string(FIND "${_text}" ")${_delim}\"" _at)
if(NOT _at EQUAL -1)
  message(FATAL_ERROR "embed_text.cmake: ${INPUT} contains ')${_delim}\"', the raw string "
                      "delimiter, at offset ${_at}; rename it in the file")
endif()
get_filename_component(_name "${INPUT}" NAME)
set(_out "// Generated from ${_name} by cmake/embed_text.cmake at build time; do not edit.\n")
string(APPEND _out "namespace ${NAMESPACE} {\n")
string(APPEND _out "extern const char ${SYMBOL}[];\n")
string(APPEND _out "const char ${SYMBOL}[] = R\"${_delim}(${_text})${_delim}\";\n")
string(APPEND _out "}  // namespace ${NAMESPACE}\n")
# Written only when it changed, so that a touched but unchanged file rebuilds nothing.
file(WRITE "${OUTPUT}.tmp" "${_out}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
