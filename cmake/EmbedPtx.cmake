# cmake -DPTX=in.ptx -DOUT=out.cc -P EmbedPtx.cmake: the PTX as a C string in a .cc file
# (the GPU path loads it with cuModuleLoadData; src/gpu/device_stage.cc).
file(READ ${PTX} text)
file(WRITE ${OUT} "// Generated from ${PTX} by cmake/EmbedPtx.cmake.\nextern \"C\" const char stoker_resize_kernel_ptx[];\nextern \"C\" const char stoker_resize_kernel_ptx[] = R\"stokerptx(${text})stokerptx\";\n")
