# Optional dependencies of stoker_lib. Each module that needs a library adds it here,
# guarded so the core builds without it (the module's sources check STOKER_HAVE_*).
function(stoker_optional_deps target)
endfunction()
