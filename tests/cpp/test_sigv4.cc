// AWS Signature Version 4 (storage/detail/sigv4.hpp) against the examples AWS publishes in
// "Signature Calculations for the Authorization Header" of the S3 API reference.
#include <gtest/gtest.h>

#include "storage/detail/sigv4.hpp"

namespace shardload::detail {
namespace {

const AwsCredentials kExampleKeys{"AKIAIOSFODNN7EXAMPLE",
                                  "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr const char* kEmptyHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(SigV4, Sha256OfNothingIsTheEmptyPayloadHash) { EXPECT_EQ(sha256_hex(""), kEmptyHash); }

// The documentation's "Example: GET Object": the first 10 bytes of examplebucket/test.txt.
TEST(SigV4, GetObjectWithRangeMatchesThePublishedExample) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  // Unsorted and in mixed case on purpose: the canonical form sorts and lowers them.
  r.headers = {{"x-amz-date", "20130524T000000Z"},
               {"Range", "bytes=0-9"},
               {"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmptyHash}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(sigv4_canonical_request(r),
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            "\nx-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(sigv4_canonical_request(r)),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(sigv4_authorization(r, kExampleKeys, "us-east-1", "s3", "20130524T000000Z"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// The documentation's "Example: GET Bucket Lifecycle": a query in the canonical request.
TEST(SigV4, QueryIsSigned) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.canonical_query = "lifecycle=";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", "20130524T000000Z"},
               {"x-amz-content-sha256", kEmptyHash}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(sigv4_authorization(r, kExampleKeys, "us-east-1", "s3", "20130524T000000Z"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
            "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4, HeaderValuesAreTrimmedAndSpacesFolded) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/k";
  r.headers = {{"Host", "h"}, {"X-Amz-Meta-A", "  a   b  "}};
  r.payload_hash = kEmptyHash;
  EXPECT_EQ(sigv4_canonical_request(r),
            std::string("GET\n/k\n\nhost:h\nx-amz-meta-a:a b\n\nhost;x-amz-meta-a\n") + kEmptyHash);
}

TEST(SigV4, KeysAreEncodedAsS3Signs) {
  EXPECT_EQ(s3_uri_encode("dir/a b+c~_-.npy", true), "dir/a%20b%2Bc~_-.npy");
  EXPECT_EQ(s3_uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(s3_uri_encode("\xc3\xa9", true), "%C3%A9");
}

}  // namespace
}  // namespace shardload::detail
