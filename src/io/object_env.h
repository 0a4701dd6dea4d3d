// Object storage behind the Env seam: s3://bucket/key and gs://bucket/key paths.
//
// Env::Default() is a scheme router (NewSchemeRouterEnv): paths that start with s3:// or gs://
// go to ObjectStoreEnv(), every other path to the local Env, so each format, convert, verify,
// the benches and stoker.Pipeline take object URLs wherever they take a path.
//
// The client is Apache Arrow's S3FileSystem / GcsFileSystem from the pyarrow wheel's
// libarrow (the AWS SDK for C++ and google-cloud-cpp are inside it); see
// docs/remote-storage.md for why, and for every setting. Built without it (no pyarrow at
// configure time), every call on an object URL fails with kUnimplemented "stoker was built
// without S3 support ...".
//
// Configuration is read from the environment once, on the first object-store call:
//   credentials  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE
//                with ~/.aws/credentials and ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE,
//                AWS_CONFIG_FILE), web identity / role as the AWS SDK's default chain has
//                them; AWS_NO_SIGN_REQUEST=1 for anonymous access to public buckets
//   endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL (S3-compatible stores;
//                http://host:port or https://host); path-style addressing with an endpoint,
//                virtual-host without one; STOKER_S3_ADDRESSING=virtual|path overrides
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region; otherwise each
//                bucket's region is looked up (no endpoint) or us-east-1 (with one)
//   retries      AWS_MAX_ATTEMPTS (default 8): exponential backoff with full jitter
//                (base STOKER_S3_RETRY_BASE_MS=50, cap 5 s) on 5xx, 503 SlowDown,
//                throttling, connection resets and timeouts; never on 403/404
//   deadlines    STOKER_S3_CONNECT_TIMEOUT_S (default 3), STOKER_S3_REQUEST_TIMEOUT_S
//                (default 10: a request with no byte for that long fails and is retried),
//                STOKER_S3_DEADLINE_S (default 60: no new attempt starts after it)
//   parallelism  STOKER_S3_PART_MB (default 8): reads larger than 1.5 parts are split into
//                parts fetched in parallel by STOKER_S3_THREADS (default 16) connections
//   gs://        Arrow's GcsFileSystem with Google's default credentials
//                (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata server);
//                STORAGE_EMULATOR_HOST=host:port for an emulator (anonymous, http); or,
//                with STOKER_GCS_HMAC_KEY_ID and STOKER_GCS_HMAC_SECRET, GCS's
//                S3-compatible XML API (STOKER_GCS_XML_ENDPOINT, default
//                https://storage.googleapis.com) through the S3 client with HMAC keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "io/env.h"

namespace stoker {

// True for "s3://..." and "gs://..." (the schemes ObjectStoreEnv serves).
bool IsObjectStoreUri(std::string_view path);

// The process-wide object-store Env (never null; lives until exit).
Env* ObjectStoreEnv();

// Whether this build has an object-store client (Arrow S3/GCS).
bool ObjectStoreAvailable();

// An Env that sends object URLs to ObjectStoreEnv() and other paths to `local` (not owned).
// Env::Default() is one of these around the POSIX Env.
Env* NewSchemeRouterEnv(Env* local);

// Counters since the process started (all object-store Envs together), for bench io and
// bench pipeline.
struct ObjectStoreCounters {
  uint64_t get_requests = 0;    // ranged GETs issued by ReadAt (parts counted one by one)
  uint64_t bytes_read = 0;
  uint64_t retries = 0;         // attempts the retry strategy allowed after a failure
  uint64_t head_requests = 0;   // opens and Stats
  uint64_t list_requests = 0;
  uint64_t objects_written = 0;
};
ObjectStoreCounters GetObjectStoreCounters();

// Re-reads the configuration from the environment for objects opened after the call (tests
// and benches change AWS_ENDPOINT_URL or deadlines between cases). Not thread-safe with
// concurrent object-store calls.
void ResetObjectStoreConfigForTesting();

}  // namespace stoker
