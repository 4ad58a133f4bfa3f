# Build of the ring engine's native addon (src/capture/ring/moat-ring.c), run by
# `npm ci` through the package's install script (node-gyp rebuild). C only: no
# C++ runtime, no node-addon-api; N-API version 8 (Node >= 14.17) for the async
# cleanup hooks that close the rings of an ending worker thread.
{
  "targets": [
    {
      "target_name": "moat_ring",
      "sources": ["moat-ring.c"],
      "defines": ["NAPI_VERSION=8", "_GNU_SOURCE"],
      "cflags": ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}
