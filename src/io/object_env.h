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
#include <functional>
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
  uint64_t cut_responses = 0;   // responses the client took as complete that were cut short
                                // inside their headers (re-asked; see object_internal)
};
ObjectStoreCounters GetObjectStoreCounters();

// Re-reads the configuration from the environment for objects opened after the call (tests
// and benches change AWS_ENDPOINT_URL or deadlines between cases). Not thread-safe with
// concurrent object-store calls.
void ResetObjectStoreConfigForTesting();

// Checks on what the S3 client reports, kept free of the client so that they are unit-tested
// in every build. Why they exist: curl and the AWS SDK take a response whose connection was
// cut inside its headers for a complete one with an empty body (measured against S3Proxy
// through toxiproxy's limit_data, tests/cli/test_object_store.py). A HEAD cut before
// Content-Length reports size 0; a ranged GET cut in its headers writes nothing, and
// Arrow's ReadAt still reports the full count: the caller's buffer comes back unwritten.
namespace object_internal {

struct RetryPolicy {
  int max_attempts = 8;
  std::function<bool()> expired;             // the total deadline has passed
  std::function<void(int attempt)> backoff;  // waits before attempt+1 (jitter)
};

// One request for [off, off+n) into dst; returns the bytes it says it wrote.
using ReadFn = std::function<Result<size_t>(uint64_t off, size_t n, uint8_t* dst)>;

// Reads [off, off+len) of `url` into dst. Before each request the last bytes of the range
// are set to a marker (two markers, alternating between attempts); a response that reports
// success but leaves the marker in place wrote nothing there and is asked again. Data whose
// tail equals a marker is accepted on the next attempt (it no longer equals that attempt's
// marker). Short reads resume where they stopped; a read of 0 bytes means the object ended
// early (kCorrupt). Fails with kDeadlineExceeded naming the URL and range once attempts or
// the deadline are spent. `cut` counts the responses found cut.
Status ReadChecked(const std::string& url, uint64_t object_size, uint64_t off, size_t len,
                   uint8_t* dst, const ReadFn& read, const RetryPolicy& policy,
                   uint64_t* cut = nullptr);

struct HeadAnswer {
  uint64_t size = 0;
  std::string etag;
  int64_t mtime_ns = -1;  // Last-Modified, when the answer carried one
};

// "2026-12-06T10:05:44Z" (the form Arrow gives an S3 HEAD's Last-Modified in) as ns since the
// epoch; -1 when it is not in that form.
int64_t ParseIsoUtc(const std::string& s);
using HeadFn = std::function<Result<HeadAnswer>()>;

// With `want_etag` (an S3 client's HEAD: S3 always sends an ETag), an answer is taken when it
// is complete: an ETag and a size > 0, or size 0 with the ETag of an empty object
// ("d41d8cd98f00b204e9800998ecf8427e", MD5 of nothing). Otherwise the HEAD is asked again;
// three equal answers in a row of size 0 with a multipart ETag ("<md5>-N") are taken (an
// empty object uploaded in parts); size 0 with a single-part ETag other than the empty MD5,
// or no ETag, never is: once attempts or the deadline are spent, kDeadlineExceeded naming
// the URL. Without `want_etag` the first answer is taken. Errors
// from `head` are returned as they are.
Result<HeadAnswer> HeadChecked(const std::string& url, const HeadFn& head, bool want_etag,
                               const RetryPolicy& policy, uint64_t* cut = nullptr);

}  // namespace object_internal

}  // namespace stoker
