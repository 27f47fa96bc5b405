// Status: secrets in a URL's query never reach an error's message or path.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/detail/secrets.hpp"
#include "shardload/status.hpp"

namespace shardload {
namespace {

TEST(RedactSecrets, StoreOptionsSecretsAreHiddenAndTheRestKept) {
  const std::string url =
      "s3://b/d/x.npy?endpoint_override=h%3A1&access_key=AKID&secret_key=wJal%2Fr+X&"
      "session_token=FQo%3D%3D&region=us-east-1";
  EXPECT_EQ(redact_secrets(url),
            "s3://b/d/x.npy?endpoint_override=h%3A1&access_key=AKID&secret_key=***&"
            "session_token=***&region=us-east-1");
}

TEST(RedactSecrets, PresignedSignaturesAreHiddenWithoutRegardToCase) {
  EXPECT_EQ(redact_secrets("https://h/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=abc123&"
                           "x-amz-security-token=tok: HTTP 403"),
            "https://h/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=***&"
            "x-amz-security-token=***: HTTP 403");
  EXPECT_EQ(redact_secrets("'https://a.blob/c?sv=1&sig=S%2B1' and https://g/o?X-Goog-Signature=ff"),
            "'https://a.blob/c?sv=1&sig=***' and https://g/o?X-Goog-Signature=***");
}

TEST(RedactSecrets, OnlyQueryKeysAreSecrets) {
  // Not after '?' or '&', or a key none of whose words names a secret ("xsig" is no "sig"):
  // left as it is.
  for (const std::string text :
       {"my_secret_key=1", "s3://b/k?xsig=2&keys=3&design=4", "a secret_key=v", "sig=1",
        "s3://b/k?secret_key", "s3://b/k?secret_key=", "no query at all"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, AKeyHoldingASecretsWordIsASecret) {
  // No list names them: each holds a word of a secret (token, secret, session, password, a
  // key that is no identifier's), whatever its spelling.
  EXPECT_EQ(redact_secrets("s3://b/k?not_secret_key=1&sas_token=2&tokens=3&JSESSIONID=4&"
                           "dbPassword=5&my%5Fapi%5Fkey=6&clientSecretV2=7"),
            "s3://b/k?not_secret_key=***&sas_token=***&tokens=***&JSESSIONID=***&"
            "dbPassword=***&my%5Fapi%5Fkey=***&clientSecretV2=***");
  // A password's short and other forms, a session's id or cookie.
  EXPECT_EQ(redact_secrets("https://h/o?user=u&pass=1&pw=2&passphrase=3&db_passcode=4&sid=5&"
                           "cookie=6&creds=7&bypass=8"),
            "https://h/o?user=u&pass=***&pw=***&passphrase=***&db_passcode=***&sid=***&"
            "cookie=***&creds=***&bypass=8");
  // Identifiers and what describes a value, not the value, stay.
  const std::string shown =
      "https://h/o?AccessKeyId=1&OSSAccessKeyId=2&oauth_consumer_key=3&Key-Pair-Id=4&"
      "token_type=5&oauth_signature_method=6&X-Amz-SignedHeaders=7&session_expires=8";
  EXPECT_EQ(redact_secrets(shown), shown);
}

TEST(RedactSecrets, AnOAuthClientAssertionIsASecret) {
  // A signed JWT that stands for the client's secret (RFC 7523); its type stays.
  EXPECT_EQ(redact_secrets("https://h/o?client_assertion=eyJhbGc.eyJzdWI.c2ln&"
                           "client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Ajwt-bearer&"
                           "clientAssertion=eyJx"),
            "https://h/o?client_assertion=***&"
            "client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Ajwt-bearer&clientAssertion=***");
}

TEST(RedactSecrets, AHiddenValueIsHiddenWhereTheMessageQuotesItAgain) {
  // A server's answer that quotes a hidden value, as given or percent-decoded: hidden there too.
  EXPECT_EQ(redact_secrets("http://u:pw-S3cr3t@h/o?Signature=vjbyPxybd%2BZfKQ%3D&token=T0k3nT0k3n"
                           "&v=1: HTTP 403: sig vjbyPxybd+ZfKQ= T0k3nT0k3n pw-S3cr3t v=1"),
            "http://u:***@h/o?Signature=***&token=***&v=1: HTTP 403: sig *** *** *** v=1");
  // A value shorter than 6 bytes is not looked for elsewhere (it would hide ordinary words).
  EXPECT_EQ(redact_secrets("http://h/o?token=abc: abc"), "http://h/o?token=***: abc");
}

TEST(RedactSecrets, AUserPartAfterMoreSlashesIsHidden) {
  // libcurl reads "http:///u:pw@h/" as "http://u:pw@h/" and sends the password.
  EXPECT_EQ(redact_secrets("http:///alice:pw-S3cr3t@h/d/x.npy: HTTP 404"),
            "http:///alice:***@h/d/x.npy: HTTP 404");
  EXPECT_EQ(redact_secrets("https:////T0k3nT0k3n@h/x"), "https:////***@h/x");
  EXPECT_EQ(redact_secrets("file:///d/x.npy and http:///h/x.npy"),
            "file:///d/x.npy and http:///h/x.npy");
}

TEST(RedactSecrets, AUserPartAfterOneSlashOfAServedSchemeIsHidden) {
  // "http:/u:pw@h/x.npy" is refused as a URL mistyped, and shown as written in that refusal.
  EXPECT_EQ(
      redact_secrets("source 'http:/alice:pw-S3cr3t@h/x.npy': write "
                     "'http://alice:pw-S3cr3t@h/x.npy' (or './http:/alice:pw-S3cr3t@h/x.npy')"),
      "source 'http:/alice:***@h/x.npy': write 'http://alice:***@h/x.npy' (or "
      "'./http:/alice:***@h/x.npy')");
  EXPECT_EQ(redact_secrets("HTTPS:/T0k3nT0k3n@h/x"), "HTTPS:/***@h/x");
  EXPECT_EQ(redact_secrets("S3:/AK:sk@b/d/"), "S3:/AK:***@b/d/");
  // '\\' among the slashes, or none (a Windows habit): the user part all the same.
  EXPECT_EQ(redact_secrets("http:/\\/u:S3cr3t@h/ http:\\\\u:S3cr3t@h/ http:u:S3cr3t@h/"),
            "http:/\\/u:***@h/ http:\\\\u:***@h/ http:u:***@h/");
  // Not a served scheme, or inside a longer word: left as it is.
  EXPECT_EQ(redact_secrets("c:/u:x@y gs:/u:x@y xhttp:/u:x@y git+http:/u:x@y"),
            "c:/u:x@y gs:/u:x@y xhttp:/u:x@y git+http:/u:x@y");
}

TEST(RedactSecrets, AUserPartAfterTwoSlashesInAnySpellingIsHidden) {
  // One rule rather than a list of typos: two slashes in any spelling ('/', '\\', "%2F", a
  // look-alike), blanks among them, whatever stands between a scheme-like word and them.
  for (const std::string text :
       {"http:\u00a0//", "http:/\u200b/", "http\u2236//", "http\ua789//", "http\ufe55//",
        "http%3A//", "http%3A%2F%2F", "//", "hxxps[:]//", "http:\uff0f\u2215", "s3;\\\\",
        "http:/\\u200b/", "http:\\u202e//"}) {
    EXPECT_EQ(redact_secrets("loading " + text + "alice:pw-S3cr3t@h/x.npy: failed"),
              "loading " + text + "alice:***@h/x.npy: failed");
  }
  // A token alone after a scheme-like word and marks; after bare slashes, only a password.
  EXPECT_EQ(redact_secrets("http\u2236//T0k3nT0k3n@h/x"), "http\u2236//***@h/x");
  EXPECT_EQ(redact_secrets("hxxps[:]//T0k3nT0k3n@h/x"), "hxxps[:]//***@h/x");
  for (const std::string text : {"/data//v@2/x.npy", "s3://b/k//v@2.npy", "data//v@2.npy",
                                 "see //wiki: ask ops@example.com", "x.npy: //d/e@f"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
  // A long run of slashes is looked at once (each slash starting a search took minutes).
  std::string text(400000, '/');
  text += "u:S3cr3t@h";
  EXPECT_TRUE(redact_secrets(text).ends_with("/u:***@h"));
}

TEST(RedactSecrets, APasswordBeforeAnAtSpelledOtherwiseIsHidden) {
  // The '@' percent-encoded or a look-alike (U+FF20, U+FE6B), as the slashes and the colon may
  // be: what follows the ':' is no port, so it is a password.
  for (const std::string at : {"%40", "%2540", "\uff20", "\ufe6b"}) {
    EXPECT_EQ(redact_secrets("loading http://alice:Pw9secretZQ" + at + "127.0.0.1:9/d/x.npy: x"),
              "loading http://alice:***" + at + "127.0.0.1:9/d/x.npy: x");
    EXPECT_EQ(redact_secrets("https://alice:Pw9secretZQ" + at + "h/x.npy"),
              "https://alice:***" + at + "h/x.npy");
  }
  // A port, or an encoded '@' in the path, is not a password.
  for (const std::string text :
       {"http://h:9/a%40b/x.npy", "s3://b/k%40v.npy", "http://h/a:b%40c"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, ATokenBeforeAnAtSpelledOtherwiseIsHidden) {
  // A user part without a password, its '@' percent-encoded (once or twice) or a look-alike,
  // percent-encoded with its hex digits in any case, as a server decodes them: no host name
  // holds one, so what is before it is a token, with a port after it too.
  for (const std::string at : {"%40", "%2540", "\uff20", "\ufe6b", "%EF%BC%A0", "%eF%Bc%a0",
                               "%Ef%b9%aB", "%25eF%25bC%25A0", "%25Ef%25B9%25ab"}) {
    EXPECT_EQ(redact_secrets("loading https://Pw9secretZQ" + at + "127.0.0.1:9/x.npy: x"),
              "loading https://***" + at + "127.0.0.1:9/x.npy: x");
    EXPECT_EQ(redact_secrets("s3://Pw9secretZQ" + at + "bkt/x.npy?region=us-east-1"),
              "s3://***" + at + "bkt/x.npy?region=us-east-1");
    EXPECT_EQ(redact_secrets("http\u2236//Pw9secretZQ" + at + "h/x"),
              "http\u2236//***" + at + "h/x");
    // After bare slashes (a path's, maybe), only a password: a path's "v%40" stays.
    for (const std::string text : {"/data//v" + at + "2/x.npy", "x.npy: //d/e" + at + "f",
                                   "data/v" + at + "2.npy", "s3://b/k" + at + "v.npy"}) {
      EXPECT_EQ(redact_secrets(text), text);
    }
  }
  // The echo of a token whose '@' was a look-alike, in a store's or libcurl's words (the
  // latter folds the host name to lower case).
  EXPECT_EQ(redact_secrets("s3://Pw9secretZQ%40bkt/x.npy: When resolving region for bucket "
                           "'Pw9secretZQ@bkt': failed"),
            "s3://***%40bkt/x.npy: When resolving region for bucket '***@bkt': failed");
  EXPECT_EQ(redact_secrets("https://Pw9secretZQ\uff20h/x.npy: Could not resolve host: "
                           "pw9secretzq@h"),
            "https://***\uff20h/x.npy: Could not resolve host: ***@h");
}

TEST(RedactSecrets, AUrlWrittenWithJsonEscapesIsReadAsWritten) {
  // JSON writes a look-alike colon as "\u2236": a mark after the scheme's name as the
  // character itself is, so the user part after the slashes is a URL's (here a token's whole,
  // its own ':' being a look-alike too).
  EXPECT_EQ(redact_secrets("loading {\"url\": \"http\\u2236//alice\\u2236Pw9secretZQ@h:9/"
                           "x.npy\"}: no number field"),
            "loading {\"url\": \"http\\u2236//***@h:9/x.npy\"}: no number field");
  EXPECT_EQ(redact_secrets("{\"u\": \"http\\u003a//alice:Pw9secretZQ@h/x\"}"),
            "{\"u\": \"http\\u003a//alice:***@h/x\"}");
  // An escape of a letter or digit is no mark: "x\u0041//v@2" stays a path.
  for (const std::string text : {"/d/x\\u0041//v@2/x.npy", "/d/\\u2236//v@2/x.npy"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, APasswordMixingStopsIsHiddenWhole) {
  // A '#' or '?' and then a '=', '/' or space (or a '/' and then a '#' or '?'): the user part
  // runs to its '@' whatever it holds, where the authority is "user:" and no port.
  for (const char* pw : {"Pa#ss=S3cr3tw", "Pa?ss=S3cr3tw", "Pa#S3cr3t/w", "Pa/S3cr3t#w",
                         "Pa/S3cr3t?w", "pa#ss S3cr3t", "pa#S3cr3t&k=v", "#S3cr3t=x"}) {
    const std::string url = std::string("http://alice:") + pw + "@h:9/d/x.npy";
    EXPECT_EQ(redact_secrets("reading '" + url + "': failed"),
              "reading 'http://alice:***@h:9/d/x.npy': failed")
        << url;
  }
  EXPECT_EQ(redact_secrets("s3://AK:sk#ss=S3cr3t@b/d/"), "s3://AK:***@b/d/");
  // A port stays (libcurl reads it so), and so does a path's or a query's '@'.
  EXPECT_EQ(redact_secrets("http://h:8080/u/@me/x and http://h/x?email=bob@x.org"),
            "http://h:8080/u/@me/x and http://h/x?email=bob@x.org");
}

TEST(RedactSecrets, ATokenAsTheUserNameIsHiddenWhole) {
  // "TOKEN:@host" and GitHub's "TOKEN:x-oauth-basic@host": the token is the user name.
  EXPECT_EQ(redact_secrets("https://ghp_S3cr3t:@h/x"), "https://***@h/x");
  EXPECT_EQ(redact_secrets("https://ghp_S3cr3t:x-oauth-basic@h/x"), "https://***@h/x");
  EXPECT_EQ(redact_secrets("https://ghp_S3cr3t:x-oauth-bearer@h/x"), "https://***@h/x");
  EXPECT_EQ(redact_secrets("https://alice:pw@h/x"), "https://alice:***@h/x");
}

TEST(RedactSecrets, WhiteSpaceAValueHoldsIsHiddenWithIt) {
  // The option parser ends a value at '&' only: a value typed with a leading space, and white
  // space after which the URL goes on, are the value's.
  EXPECT_EQ(redact_secrets("s3://b/x?access_key=AK&secret_key= S3cr3tTail: cannot open"),
            "s3://b/x?access_key=AK&secret_key=***: cannot open");
  EXPECT_EQ(redact_secrets("s3://b/x?secret_key=ab S3cr3t&scheme=http: failed"),
            "s3://b/x?secret_key=***&scheme=http: failed");
  EXPECT_EQ(redact_secrets("http://h/x?token=abcdef S3cr3tTail&a=b c"),
            "http://h/x?token=***&a=b c");
  // A value that ends at white space before the message's words keeps them, and the URL a
  // message quotes again after it.
  EXPECT_EQ(redact_secrets("s3://b/x?secret_key=abc: cannot open: x"),
            "s3://b/x?secret_key=***: cannot open: x");
  EXPECT_EQ(redact_secrets("loading s3://b/x?e=1&secret_key=abcdef: s3://b/x?e=1&k=v: failed"),
            "loading s3://b/x?e=1&secret_key=***: s3://b/x?e=1&k=v: failed");
}

TEST(RedactSecrets, EverySecretQueryKeyIsHiddenWithoutRegardToCaseOrEncoding) {
  // SigV2 and CloudFront presigned URLs, a CDN's token, OAuth's access_token (also in a
  // fragment), an API key: the values go, the keys and every other parameter stay.
  EXPECT_EQ(redact_secrets("https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA1&Expires=9&"
                           "Signature=vjbyPxybd%2BZfKQ%3D"),
            "https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA1&Expires=9&Signature=***");
  EXPECT_EQ(redact_secrets("https://d1.cloudfront.net/a.npy?Policy=eyJ9&SIGNATURE=abc~d_&"
                           "Key-Pair-Id=K2"),
            "https://d1.cloudfront.net/a.npy?Policy=eyJ9&SIGNATURE=***&Key-Pair-Id=K2");
  EXPECT_EQ(redact_secrets("http://h/d/?token=T0k3n&max_attempts=2: cannot open: HTTP 403"),
            "http://h/d/?token=***&max_attempts=2: cannot open: HTTP 403");
  EXPECT_EQ(redact_secrets("(http://h/a.npy?Access_Token=ya29.a0Af/B+c=)."),
            "(http://h/a.npy?Access_Token=***).");
  EXPECT_EQ(redact_secrets("http://h/a#access_token=ya29&token_type=bearer"),
            "http://h/a#access_token=***&token_type=bearer");
  EXPECT_EQ(redact_secrets("https://h/o?key=AIzaSy&alt=media"), "https://h/o?key=***&alt=media");
  // A server decodes the key before it reads it: so does the redaction.
  EXPECT_EQ(redact_secrets("s3://b/k?%73ecret_key=s3cr3t&%53IG=x"),
            "s3://b/k?%73ecret_key=***&%53IG=***");
  // A value runs to the end of the URL: a ':', ')' or quote inside it is part of the secret.
  EXPECT_EQ(redact_secrets("'http://h/a?token=ab:cd)e\"f' is gone"),
            "'http://h/a?token=***' is gone");
  EXPECT_EQ(redact_secrets("{\"path\": \"http://h/a?sig=x\"}, ['s3://b/k?secret_key=y']"),
            "{\"path\": \"http://h/a?sig=***\"}, ['s3://b/k?secret_key=***']");
  // Identifiers that grant nothing alone are shown.
  for (const std::string text :
       {"https://h/o?X-Amz-Credential=AKIA%2F2024&X-Amz-Date=1&access_key=AK",
        "https://h/o?X-Goog-Credential=sa%40p&keys=2&signature_version=4"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, ASecretOfAQueryEncodedIntoAValueIsHidden) {
  // A presigned URL passed to a fetching proxy (?url=, ?next=): its query's marks are
  // percent-encoded, in either case, once or twice. The inner secret is hidden to where the
  // outer value ends; the outer query's next item and the inner identifiers before it stay.
  EXPECT_EQ(redact_secrets("https://proxy/fetch?url=https%3A%2F%2Fb.s3.amazonaws.com%2Fk.npy%3F"
                           "X-Amz-Credential%3DAKIA%26X-Amz-Signature%3Dsig9secret%26X-Amz-"
                           "Date%3D1&b=1: HTTP 502"),
            "https://proxy/fetch?url=https%3A%2F%2Fb.s3.amazonaws.com%2Fk.npy%3F"
            "X-Amz-Credential%3DAKIA%26X-Amz-Signature%3D***&b=1: HTTP 502");
  EXPECT_EQ(redact_secrets("https://h/r.npy?next=%2fx.npy%3ftoken%3dT0k3nSecret%26a%3d1"),
            "https://h/r.npy?next=%2fx.npy%3ftoken%3d***");
  EXPECT_EQ(redact_secrets("https://h/r?u=https%253A%252F%252Fb%252Fk%253Fa%253D1%2526sig%253DS1g"
                           "%2526b%253D2&v=1"),
            "https://h/r?u=https%253A%252F%252Fb%252Fk%253Fa%253D1%2526sig%253D***&v=1");
  EXPECT_EQ(redact_secrets("https://h/r?u=https%3A%2F%2Fb%2Fk%3Bsig%3DS1g"),
            "https://h/r?u=https%3A%2F%2Fb%2Fk%3Bsig%3D***");
  EXPECT_EQ(redact_secrets("https://h/r?u=https%3A%2F%2Fb%2Fk%23access_token%3DS1g"),
            "https://h/r?u=https%3A%2F%2Fb%2Fk%23access_token%3D***");
  // The inner key's own escapes, encoded again with it ("%74oken" as "%2574oken").
  EXPECT_EQ(redact_secrets("https://h/r?u=%2Fk%3F%2574oken%3DT0k3nSecret&v=%2526%252573ig%253DS"),
            "https://h/r?u=%2Fk%3F%2574oken%3D***&v=%2526%252573ig%253D***");
  // The encoded URL alone, with no '=' in the text at all.
  EXPECT_EQ(redact_secrets("cannot open https%3A%2F%2Fb%2Fk%3Ftoken%3DT0k3nSecret here"),
            "cannot open https%3A%2F%2Fb%2Fk%3Ftoken%3D*** here");
  // JSON's "\u0026" for '&' (Go's json.Marshal writes a URL so).
  EXPECT_EQ(redact_secrets("{\"url\": \"https://h/x.npy?a=1\\u0026token=T0k3nSecret\"}"),
            "{\"url\": \"https://h/x.npy?a=1\\u0026token=***\"}");
  // BunnyCDN's token in the path; its token_path names a path, no secret, and stays.
  EXPECT_EQ(redact_secrets("https://h/bcdn_token=T0k3nSecret&expires=1598024587&"
                           "token_path=%2Fv%2F/v/x.npy: HTTP 403"),
            "https://h/bcdn_token=***&expires=1598024587&token_path=%2Fv%2F/v/x.npy: HTTP 403");
  // One ended by its segment's '/' (as sealing ends it): the object's name stays, and the
  // token alone, where a server's answer quotes it, is hidden too.
  EXPECT_EQ(redact_secrets("https://h/bcdn_token=T0k3nSecret/v/x.npy: HTTP 403: <Error>denied "
                           "(token T0k3nSecret)</Error>"),
            "https://h/bcdn_token=***/v/x.npy: HTTP 403: <Error>denied (token ***)</Error>");
  // An encoded query without a secret, and a key a mark cuts off from its '=', stay.
  for (const std::string text :
       {"https://h/r?u=https%3A%2F%2Fb%2Fk%3Fa%3D1%26b%3D2", "s3://b/k?u=x%26tok%26en%3Dv",
        "https://h/r?u=x%26token&sig2", "/d/bcdn_token.npy", "/d/x_token=1/y.npy"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
  // Such an item is one to seal whole; an item without a secret is not.
  EXPECT_TRUE(detail::query_item_holds_secret("url=https%3A%2F%2Fb%2Fk%3Fsig%3DS1g"));
  EXPECT_TRUE(detail::query_item_holds_secret("u=%2Fk%253Fa%253D1%2526token%253DS1g"));
  EXPECT_TRUE(detail::query_item_holds_secret("token=T"));
  EXPECT_FALSE(detail::query_item_holds_secret("url=https%3A%2F%2Fb%2Fk%3Fa%3D1%26b%3D2"));
  EXPECT_FALSE(detail::query_item_holds_secret("expires=1"));
}

TEST(RedactSecrets, AHashOrQuestionMarkInAUserPartOrAnOptionsValueHidesNoLess) {
  // A '#' or '?' in the password ends the authority by RFC 3986; the password still goes, to
  // the user part's last '@'.
  EXPECT_EQ(redact_secrets("http://alice:pa#ss@h/d/x.npy: refused"),
            "http://alice:***@h/d/x.npy: refused");
  EXPECT_EQ(redact_secrets("https://alice:p?w#d@x@h/x"), "https://alice:***@h/x");
  EXPECT_EQ(redact_secrets("https://T0K?EN@h/x"), "https://***@h/x");
  // An s3:// option value keeps its '#': all of it is hidden.
  EXPECT_EQ(redact_secrets("s3://b/d/?secret_key=ab#SECRETTAIL&region=r"),
            "s3://b/d/?secret_key=***&region=r");
  EXPECT_EQ(redact_secrets("s3://b/d/?session_token=t0k#en"), "s3://b/d/?session_token=***");
  // A parser that ends the path at the '?' quotes the password's pieces apart: hidden too.
  EXPECT_EQ(redact_secrets("s3://AK:SECRET?SECRETTAIL@b/k: 'SECRETTAIL@b/k' after the URL's "
                           "first '?' is not a KEY=VALUE option"),
            "s3://AK:***@b/k: '***@b/k' after the URL's first '?' is not a KEY=VALUE option");
  // A query or a fragment with an '=' before its '@', or words, is no user part.
  for (const std::string text : {"https://h?q=a@b/x", "https://h#k=v@x", "http://h#top see a@b"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, TheUserPartsPasswordIsHiddenAndTheRestKept) {
  EXPECT_EQ(redact_secrets("https://alice:pa%40ss@h:8443/d/a.npy: cannot open: HTTP 401"),
            "https://alice:***@h:8443/d/a.npy: cannot open: HTTP 401");
  // An '@' or a quote in the password (unencoded): the user part ends at the authority's
  // last '@'.
  EXPECT_EQ(redact_secrets("http://u:p@ss:w@h/x and 'http://v:q\"'@g'"),
            "http://u:***@h/x and 'http://v:***@g'");
  // A user part alone is a token to the servers that take one so.
  EXPECT_EQ(redact_secrets("https://ghp_T0KEN@h/a.npy"), "https://***@h/a.npy");
  // Both forms at once, and an '@' after the authority is not a user part.
  EXPECT_EQ(redact_secrets("s3://b/k@v2.npy?secret_key=x&region=r"),
            "s3://b/k@v2.npy?secret_key=***&region=r");
  EXPECT_EQ(redact_secrets("https://u:p@h/a?sig=s"), "https://u:***@h/a?sig=***");
  // A '/' in the password ends the authority early; what follows the ':' is no port, and
  // goes to its '@'. A port and an '@' in the path are no user part.
  EXPECT_EQ(redact_secrets("https://alice:pa/ss@h/x: HTTP 400"), "https://alice:***@h/x: HTTP 400");
  for (const std::string text : {"https://h/a.npy", "user@example.com", "http://@h/", "a:b@c",
                                 "https://h:8443/p/u@x.npy", "http://[::1]:80/a@b"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

// The work redact_secrets does on `text`, as its counter tells it (the bytes its scans look
// at): what the tests below compare, never the time, which a sanitizer build or a loaded
// machine stretches by any factor.
std::uint64_t redaction_work_on(const std::string& text) {
  const std::uint64_t before = detail::redaction_work();
  (void)redact_secrets(text);
  return detail::redaction_work() - before;
}

TEST(RedactSecrets, AParameterInAPathHidesItsValueNotTheRestOfThePath) {
  // A ';' parameter of a path segment (Java's ";jsessionid=", a SAS sig typed after ';') keeps
  // its value hidden, to its segment's end: the object's name after it showed as "***" too.
  EXPECT_EQ(redact_secrets("https://h/d;sig=S1g/x.npy: HTTP 404"),
            "https://h/d;sig=***/x.npy: HTTP 404");
  EXPECT_EQ(redact_secrets("https://h/d;jsessionid=S1d;v=2/x.npy?a=1"),
            "https://h/d;jsessionid=***;v=2/x.npy?a=1");
  EXPECT_EQ(redact_secrets("s3://b/k;sig=1/x.npy"), "s3://b/k;sig=***/x.npy");
  EXPECT_EQ(redact_secrets("D/run;token=T0k/shard_0000.npy: changed"),
            "D/run;token=***/shard_0000.npy: changed");
  // A path after white space that follows a query: a path again.
  EXPECT_EQ(redact_secrets("http://h/x.npy?u=1 and http://h/d;sig=S1g/x.npy"),
            "http://h/x.npy?u=1 and http://h/d;sig=***/x.npy");
  // In a query or a fragment a ';' item's value runs to the next '&' as before (some servers
  // take ';' for '&', and a value may hold '/').
  EXPECT_EQ(redact_secrets("https://h/x.npy?ref=main;sig=S1g/x/y&a=1"),
            "https://h/x.npy?ref=main;sig=***&a=1");
  EXPECT_EQ(redact_secrets("https://h/x.npy#frag;access_token=T/1"),
            "https://h/x.npy#frag;access_token=***");
  // In proportion to the text: each parameter's value is looked for within its segment, not to
  // the next '&' across all the later ones.
  const auto text_of = [](int parameters) {
    std::string text = "https://h/d";
    for (int i = 0; i < parameters; ++i) text += ";sig=x";
    return text + "/x.npy";
  };
  const std::uint64_t small = redaction_work_on(text_of(3125));
  const std::uint64_t large = redaction_work_on(text_of(50000));
  EXPECT_LT(large, 24 * small) << small << " then " << large;  // 16 times the text
}

TEST(RedactSecrets, AKeyEndingAtAnEncodedEqualsAfterAPlainMarkIsRead) {
  // A presigned URL given as a query value with only '=' and '&' escaped (RFC 3986 lets a
  // query hold '?', '/' and ':'): its first key follows a plain '?'.
  EXPECT_EQ(redact_secrets("http://h/x.npy?url=https://b/k.npy?token%3DT0k3nSecret%26a%3D1"),
            "http://h/x.npy?url=https://b/k.npy?token%3D***");
  EXPECT_EQ(redact_secrets("http://h/x.npy?u=https://b/k.npy?X-Amz-Signature%253DS1g&v=1"),
            "http://h/x.npy?u=https://b/k.npy?X-Amz-Signature%253D***&v=1");
  EXPECT_EQ(redact_secrets("http://h/x.npy#access_token%3DT0k"),
            "http://h/x.npy#access_token%3D***");
  EXPECT_EQ(redact_secrets("http://h/x.npy?u=k;sig%3DS1g"), "http://h/x.npy?u=k;sig%3D***");
  EXPECT_TRUE(detail::query_item_holds_secret("url=https://b/k.npy?token%3DT%26a%3D1"));
  // Not a secret's key, or a plain '=' first: as before.
  for (const std::string text : {"http://h/x.npy?url=https://b/k.npy?a%3D1%26b%3D2",
                                 "http://h/x.npy?q=token%3D1", "http://h/x.npy?%3Dtoken"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, CdnAndHostTokenKeysAreSecrets) {
  EXPECT_EQ(redact_secrets("https://h/x.npy?hdnea=exp=1~acl=%2F*~hmac=H&dl=1"),
            "https://h/x.npy?hdnea=***&dl=1");
  EXPECT_EQ(redact_secrets("https://h/x.npy?sign=1700000000-r-0-S&a=1"),
            "https://h/x.npy?sign=***&a=1");
  EXPECT_EQ(redact_secrets("https://h/x.npy?rlkey=K3y&dl=1"), "https://h/x.npy?rlkey=***&dl=1");
  EXPECT_EQ(redact_secrets("https://h/x.npy?_upt=T0k&a=1"), "https://h/x.npy?_upt=***&a=1");
}

TEST(RedactSecrets, TakesWorkInProportionToTheText) {
  // A server's error text in a message can be long and crafted: many URLs whose authority a
  // '/' cuts short, each once made the redaction look for an '@' to the end of the text.
  const auto text_of = [](int urls) {
    std::string text = "@";
    for (int i = 0; i < urls; ++i) text += "h://x:y/ ";
    return text + "https://u:p@h/a?token=t";
  };
  const std::string text = text_of(50000);
  const std::uint64_t small = redaction_work_on(text_of(3125));
  const std::uint64_t large = redaction_work_on(text);
  EXPECT_LT(large, 24 * small) << small << " then " << large;  // 16 times the text
  const std::string out = redact_secrets(text);
  EXPECT_TRUE(out.ends_with(" https://u:***@h/a?token=***")) << out.substr(out.size() - 40);
}

TEST(RedactSecrets, WorksInProportionToTheTextForOneMarkFollowedByManyOthers) {
  // One mark and then many others, each of which once made the redaction look again through
  // the rest of the text: 16 times the text must cost about 16 times the work (its square
  // would be 256 times). The counter counts the bytes the scans look at.
  const auto repeat = [](std::string_view head, std::string_view unit, std::string_view tail,
                         std::size_t size) {
    std::string text(head);
    while (text.size() < size) text += unit;
    return text + std::string(tail);
  };
  struct Shape {
    std::string_view head, unit, tail;
  };
  const Shape shapes[] = {
      {"@", "http:", ""},                       // an '@', then scheme marks and no '/'
      {"%40", "https:", ""},                    // the '@' percent-encoded
      {"\xef\xbc\xa0", "s3:", "="},             // the full-width '@'
      {"x@", "http:\\", ""},                    // a scheme's ':' and a backslash
      {"x@", "http: ", "@"},                    // a scheme's ':' and a blank
      {"x@", "http;", "="},                     // a mark in place of the ':'
      {"@", "http\\u2236", ""},                 // a mark written as a \u escape
      {"?", "a;", "=v"},                        // a key that a ';' does not end
      {"@=", ";a", "="},                        //
      {"http://u:p#x ", "a;", "="},             //
      {"?id;", "x;", "key=v"},                  // the key after the last ';' is a secret's
      {"http://", "a", "b@h aaaaaaaa"},         // a long token, then a text of its start
      {"http://h/?token=", "a", "b aaaaaaaa"},  // a long query secret, the same
      {"?", "%26a", "=v"},                      // keys after encoded marks, no '=' until the end
      {"?u=", "%253Fa%253B", "%253Dv"},         // encoded twice
      {"?u=", "\\u0026a", "=v"},                // JSON's '&'
      {"%26", "a", "%3Dv"},                     // one key without end, its '=' encoded
      {"?u=", "%26a%3D1", ""},                  // many inner items, none a secret
      {"?token=abcdefg ", "a=2B=\r\n\n ", ""}   // quoted-printable escapes and line breaks
  };
  for (const Shape& s : shapes) {
    const std::string small = repeat(s.head, s.unit, s.tail, 16 << 10);
    const std::string large = repeat(s.head, s.unit, s.tail, 256 << 10);
    const std::uint64_t a = redaction_work_on(small);
    const std::uint64_t b = redaction_work_on(large);
    EXPECT_GE(a, small.size()) << s.head << s.unit;  // each byte is looked at
    EXPECT_LT(b, 24 * a) << s.head << s.unit << ": " << a << " then " << b;
  }
  // A long secret whose start the text repeats: hidden where it is repeated whole.
  std::string token(100000, 'a');
  token += 'b';
  std::string text = "http://" + token + "@h/ " + std::string(300000, 'a') + token;
  EXPECT_EQ(redact_secrets(text), "http://***@h/ " + std::string(300000, 'a') + "***");
}

TEST(RedactSecrets, AUserPartsSecretIsHiddenWhereTheMessageEchoesItWithoutTheScheme) {
  // Arrow's S3 errors quote the path they were given without "s3://".
  EXPECT_EQ(redact_secrets("s3://AK:sk-x@b/k: got a URI: 'AK:sk-x@b/k'"),
            "s3://AK:***@b/k: got a URI: 'AK:***@b/k'");
  EXPECT_EQ(redact_secrets("s3://AK:sk%2Fx@b/k: 'AK:sk%2Fx@b/k' 'AK:sk/x@b/k'"),
            "s3://AK:***@b/k: 'AK:***@b/k' 'AK:***@b/k'");
  EXPECT_EQ(redact_secrets("s3://tok@b/k?region=r: in bucket 'tok@b'"),
            "s3://***@b/k?region=r: in bucket '***@b'");
  // What is not the URL's secret stays, '@' and all.
  EXPECT_EQ(redact_secrets("s3://AK:sk@b/k: mail ops@example.com, 'AK:other@b'"),
            "s3://AK:***@b/k: mail ops@example.com, 'AK:other@b'");
  // Many URLs, each password echoed: the work grows with the text (16 times the URLs of the
  // same 8 passwords, about 16 times the work). Each distinct echoed secret is looked for in
  // one pass of its own, so the work is the text's length times the distinct secrets (a
  // message of a few URLs has a few).
  const auto text_of = [](int urls, int distinct) {
    std::string text;
    for (int i = 0; i < urls; ++i) {
      const std::string n = std::to_string(100000 + i % distinct);
      text += "s3://u:p" + n + "@b/k 'u:p" + n + "@b' ";
    }
    return text;
  };
  const std::uint64_t small = redaction_work_on(text_of(1500, 8));
  const std::uint64_t large = redaction_work_on(text_of(24000, 8));
  EXPECT_LT(large, 24 * small) << small << " then " << large;
  EXPECT_EQ(redact_secrets(text_of(24000, 8)).find(":p"), std::string::npos);
  EXPECT_EQ(redact_secrets(text_of(1000, 1000)).find(":p"), std::string::npos);
}

TEST(HideRequestSecrets, AnAnswerLosesTheRequestsOwnSecretsWholeAndWhereItsEndCutsThem) {
  using detail::hide_request_secrets;
  const std::vector<std::string> lines = {
      "Host: h", "x-amz-date: 20260101T000000Z", "x-amz-security-token: FwoGtokenVALUE123",
      "Authorization: AWS4-HMAC-SHA256 Credential=AKIAX/20260101/us-east-1/s3/aws4_request, "
      "SignedHeaders=host, Signature=0123456789abcdef"};
  EXPECT_EQ(
      hide_request_secrets(R"({"tok":"FwoGtokenVALUE123","sig":"0123456789abcdef"})", {}, lines),
      R"({"tok":"***","sig":"***"})");
  // The answer kept up to a cap that falls inside a secret: its start goes too (6 bytes on).
  EXPECT_EQ(hide_request_secrets(R"({"sig":"0123456789ab)", {}, lines), R"({"sig":"***)");
  EXPECT_EQ(hide_request_secrets(R"({"sig":"01234)", {}, lines), R"({"sig":"01234)");
  // The URL's secrets: a user part's password, a token in the query; and a bearer token.
  EXPECT_EQ(hide_request_secrets("given pw-secret-1 and tk-secret-2 and bearer-3xyz",
                                 {"http://u:pw-secret-1@h/x?token=tk-secret-2&n=1"},
                                 {"Authorization: Bearer bearer-3xyz", "Range: bytes=0-9"}),
            "given *** and *** and ***");
  // Headers that carry no secret are left, and so is an answer that quotes none.
  EXPECT_EQ(hide_request_secrets("Range bytes=0-9 for host h", {"http://h/x"},
                                 {"Range: bytes=0-9", "Host: h"}),
            "Range bytes=0-9 for host h");
}

TEST(HideRequestSecrets, AnAnswerQuotingASecretFormDecodedOrEscapedLosesItToo) {
  using detail::hide_request_secrets;
  // A server reads a query as a form ('+' a space) and its page quotes the value so, or as a
  // JSON encoder that escapes '/' writes it, or with HTML's references for '+' and '/'.
  const std::vector<std::string> urls = {
      "http://h/x.npy?access_token=ya29.a0Af+hIjk/lmn==&token=abc+defghi&n=1"};
  for (const std::string quoted :
       {"ya29.a0Af hIjk/lmn==", "ya29.a0Af+hIjk\\/lmn==", "ya29.a0Af&#43;hIjk&#x2F;lmn==",
        "ya29.a0Af&#x2B;hIjk&#47;lmn==", "abc defghi", "ya29.a0Af+hIjk/lmn=="}) {
    EXPECT_EQ(hide_request_secrets("denied: {\"t\": \"" + quoted + "\"}", urls, {}),
              "denied: {\"t\": \"***\"}")
        << quoted;
  }
  // A value without '+' or '/' has no such spellings, and the rest of the page stays.
  EXPECT_EQ(hide_request_secrets("a+b c/d for x.npy", urls, {}), "a+b c/d for x.npy");
}

TEST(HideRequestSecrets, AnAnswerQuotingASecretQuotedPrintableOrWrappedLosesItToo) {
  using detail::hide_request_secrets;
  // A mail-like body's quoted-printable ("=2B" for '+', "=3D" for '=', a soft line break "="
  // at a line's end) and a token wrapped across lines (a PEM-style block, a folded header).
  const std::string token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc/def+ghi==";
  const std::vector<std::string> lines = {"x-amz-security-token: " + token};
  for (const std::string quoted :
       {"IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD=2Babc/def=2Bghi=3D=3D",
        "IQoJb3JpZ2luX2VjEJr=2F=2F//////=\r\n//wEaCXVzLWVhc3QtMSJHMEUCIQD=2Babc/def=2Bghi=3D=3D",
        "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3Qt=\nMSJHMEUCIQD=2babc/def+ghi=3d=3d",
        "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH\nMEUCIQD+abc/def+ghi==",
        "IQoJb3JpZ2luX2VjEJr//////\r\n////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc/def+ghi==",
        "IQoJb3JpZ2luX2VjEJr//////////wEaCXVz\r\n LWVhc3QtMSJHMEUCIQD+abc/def\r\n\t+ghi==",
        "IQoJb3JpZ2luX2VjEJr//////////wEaCXVz\nLWVhc3QtMSJHMEUCIQD\\u002Babc/def+ghi=="}) {
    // The line after the token stays on its own line.
    EXPECT_EQ(hide_request_secrets("denied: t=" + quoted + "\nnext line", {}, lines),
              "denied: t=***\nnext line")
        << quoted;
  }
  // A value after a query's '=' that begins as a quoted-printable escape would ("2B..."),
  // with another character escaped: read as written too.
  EXPECT_EQ(
      hide_request_secrets("t=2Bsecret&#43;value;", {"http://h/x?token=2Bsecret%2Bvalue"}, {}),
      "t=***;");
  // Values shorter than 6 bytes stay, and so do line breaks and escapes that hold no secret.
  EXPECT_EQ(hide_request_secrets("t=a=2Bb/c", {}, {"x-amz-security-token: a+b/c"}), "t=a=2Bb/c");
  EXPECT_EQ(hide_request_secrets("IQoJb3JpZ2lu\nX2VjEJr x=3D=\r\nmore", {}, lines),
            "IQoJb3JpZ2lu\nX2VjEJr x=3D=\r\nmore");
}

TEST(RedactSecrets, ASecretInTheQueryOfAnEndpointOverrideIsHidden) {
  // The endpoint's own query, plain or percent-encoded, after a user part or without one.
  EXPECT_EQ(redact_secrets("s3://b/k.npy?endpoint_override=http://h:9/?token=S3cr3tTok&region=r"),
            "s3://b/k.npy?endpoint_override=http://h:9/?token=***&region=r");
  EXPECT_EQ(redact_secrets("s3://b/k.npy?endpoint_override=http%3A%2F%2Fh%3A9%2F%3F"
                           "X-Amz-Signature%3DSIG123456&region=r"),
            "s3://b/k.npy?endpoint_override=http%3A%2F%2Fh%3A9%2F%3F"
            "X-Amz-Signature%3D***&region=r");
  EXPECT_EQ(redact_secrets("s3://b/k.npy?endpoint_override=http://u:pw99@h:9/?token=Tok123"),
            "s3://b/k.npy?endpoint_override=***@h:9/?token=***");
  EXPECT_EQ(redact_secrets("s3://b/k.npy?endpoint_override=http://h:9&region=r"),
            "s3://b/k.npy?endpoint_override=http://h:9&region=r");
}

TEST(RedactSecrets, EveryStatusMessageContextAndPathIsRedacted) {
  const std::string url = "s3://b/k?region=r&secret_key=hunter2";
  const Status s = file_error(ErrorCode::kIo, url, "HTTP 403", 13)
                       .with_context("loading s3://b/?secret_key=hunter2&region=r");
  EXPECT_EQ(s.message(),
            "loading s3://b/?secret_key=***&region=r: s3://b/k?region=r&secret_key=***: HTTP 403");
  EXPECT_EQ(s.path(), "s3://b/k?region=r&secret_key=***");
  EXPECT_EQ(s.sys_errno(), 13);
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos);
}

TEST(RedactSecrets, CredentialsOfMoreServicesAreHidden) {
  // A SharePoint/OneDrive download link's bearer JWT (Microsoft Graph's downloadUrl), an Azure
  // Functions function key, a CAS service ticket, a one-time password, a WordPress nonce,
  // a Google Drive link's resource key: each key, and the rest of the URL, as given.
  EXPECT_EQ(redact_secrets("https://t.sharepoint.com/sites/x/_layouts/15/download.aspx?"
                           "UniqueId=1b2c&Translate=false&tempauth=eyJ0eXAi.e30.c2ln&"
                           "ApiVersion=2.0"),
            "https://t.sharepoint.com/sites/x/_layouts/15/download.aspx?"
            "UniqueId=1b2c&Translate=false&tempauth=***&ApiVersion=2.0");
  EXPECT_EQ(redact_secrets("https://app.azurewebsites.net/api/get?code=fnKey%3D%3D&name=x.npy"),
            "https://app.azurewebsites.net/api/get?code=***&name=x.npy");
  EXPECT_EQ(redact_secrets("https://h/x.npy?ticket=ST-1-abc-cas&otp=123456&_wpnonce=a1b2c3&"
                           "resourcekey=0-AbC&id=7"),
            "https://h/x.npy?ticket=***&otp=***&_wpnonce=***&resourcekey=***&id=7");
  // Spellings of the same: case, another word beside it, an access code.
  EXPECT_EQ(redact_secrets("https://h/x.npy?TempAuth=1&Code=2&serviceTicket=3&TOTP=4&"
                           "x_wpnonce=5&accessCode=6&access_code=7&_csrf=8"),
            "https://h/x.npy?TempAuth=***&Code=***&serviceTicket=***&TOTP=***&"
            "x_wpnonce=***&accessCode=***&access_code=***&_csrf=***");
  for (const std::string_view key :
       {"tempauth", "code", "ticket", "otp", "_wpnonce", "resourcekey", "accesscode"}) {
    EXPECT_TRUE(detail::is_secret_query_key(key)) << key;
  }
}

TEST(RedactSecrets, PasswordsNamedInOtherLanguagesAreHidden) {
  // French, Spanish (its n with a tilde percent-encoded or not), Catalan, Portuguese, German,
  // Dutch, Norwegian, Finnish, Czech.
  EXPECT_EQ(redact_secrets("https://h/x.npy?mot_de_passe=1&motDePasse=2&contrasena=3&"
                           "contrase%C3%B1a=4&contrase\xc3\xb1"
                           "a=5&contrasenya=6&senha=7&Kennwort=8&wachtwoord=9&passord=10&"
                           "salasana=11&heslo=12&lang=fr"),
            "https://h/x.npy?mot_de_passe=***&motDePasse=***&contrasena=***&"
            "contrase%C3%B1a=***&contrase\xc3\xb1"
            "a=***&contrasenya=***&senha=***&Kennwort=***&wachtwoord=***&passord=***&"
            "salasana=***&heslo=***&lang=fr");
}

TEST(RedactSecrets, KeysThatOnlyHoldTheseWordsStay) {
  // A country, postal or status code is no credential, nor is an author, OAuth 1's nonce (sent
  // in clear and signed), a ticket's type or a passenger: only the key "code" itself is hidden.
  const std::string shown =
      "https://h/x.npy?country_code=FR&zipcode=75001&status_code=200&codec=zstd&author=bob&"
      "oauth_nonce=n1&ticket_type=ST&passenger=2&nonce=3&encoding=gzip";
  EXPECT_EQ(redact_secrets(shown), shown);
}

TEST(RedactSecrets, AnOciPreAuthenticatedRequestsPathTokenIsHidden) {
  // Oracle Cloud's pre-authenticated request: the secret is the path segment after /p/, before
  // /n/NAMESPACE/b/BUCKET/ (on objectstorage.REGION.oraclecloud.com and on a namespace's own
  // host name alike); quoted again in the message, it is hidden there too.
  EXPECT_EQ(redact_secrets("https://objectstorage.us-ashburn-1.oraclecloud.com/p/AbC-dEf_123:x/"
                           "n/ns/b/bucket/o/d/x.npy: HTTP 404: no PAR AbC-dEf_123:x"),
            "https://objectstorage.us-ashburn-1.oraclecloud.com/p/***/"
            "n/ns/b/bucket/o/d/x.npy: HTTP 404: no PAR ***");
  EXPECT_EQ(redact_secrets("'https://ns.objectstorage.eu-frankfurt-1.oci.customer-oci.com/p/"
                           "T0k3n/n/ns/b/b/o/' and https://h/p/Z9/n/a/b/c/o/x.npy?token=t"),
            "'https://ns.objectstorage.eu-frankfurt-1.oci.customer-oci.com/p/"
            "***/n/ns/b/b/o/' and https://h/p/***/n/a/b/c/o/x.npy?token=***");
  // Paths of another shape stay.
  for (const std::string text :
       {"https://h/p/page-2/index.html", "https://h/p/x/n/y.npy", "/data/p/x/b/y/n/z",
        "https://h/p//n/ns/b/b/o/x", "https://h/p/x/n//b/b/o/x", "https://h/q/p/"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
  // The storage layer seals an item that holds such a URL (a proxy's url=) whole.
  EXPECT_TRUE(detail::query_item_holds_secret("url=https://h/p/T0k3n/n/ns/b/b/o/x.npy"));
  EXPECT_FALSE(detail::query_item_holds_secret("url=https://h/d/x.npy"));
}

TEST(Printable, ControlCharactersAndBytesThatAreNotUtf8AreEscaped) {
  EXPECT_EQ(printable("d/shard_0000.npy"), "d/shard_0000.npy");
  EXPECT_EQ(printable(std::string("a\0b\n\r\t\x1b[2J\x07\x7f", 12)),
            "a\\0b\\n\\r\\t\\x1b[2J\\x07\\x7f");
  // C1 controls as UTF-8 (U+0085, U+009B), the bidirectional overrides and isolates; other
  // non-ASCII text kept; bytes that are not UTF-8 (a lone 0x9b, an overlong '/', a
  // truncated sequence) as \xNN.
  EXPECT_EQ(printable("\xc2\x85\xc2\x9b[1m\xe2\x80\xae\xe2\x81\xa6\xe2\x81\xa9"),
            "\\u0085\\u009b[1m\\u202e\\u2066\\u2069");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xe2\x80\x8f"),
            "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xe2\x80\x8f");
  EXPECT_EQ(printable("\x9b[2J \xc0\xaf \xe2\x80"), "\\x9b[2J \\xc0\\xaf \\xe2\\x80");
  // Backslashes are kept, and escaping twice changes nothing.
  const std::string once = printable("a\\n\x1b\n\xc2\x9b\xff");
  EXPECT_EQ(once, "a\\n\\x1b\\n\\u009b\\xff");
  EXPECT_EQ(printable(once), once);
}

TEST(Printable, EveryStatusMessageAndContextIsEscapedAndThePathKeptExact) {
  const std::string name = "d/x\x1b]0;t\x07\ny.npy";
  const Status s = file_error(ErrorCode::kIo, name, "cannot open").with_context("loading\rd");
  EXPECT_EQ(s.message(), "loading\\rd: d/x\\x1b]0;t\\x07\\ny.npy: cannot open");
  EXPECT_EQ(s.path(), name);
}

TEST(MessageAfterPath, StripsThePathAsTheMessageShowsIt) {
  const std::string url = "s3://b/k?secret_key=longer-than-its-stars";
  EXPECT_EQ(message_after_path(file_error(ErrorCode::kIo, url, "cannot open: HTTP 403"), url),
            "cannot open: HTTP 403");
  const std::string nul = std::string("/d/a") + '\0' + "b";
  EXPECT_EQ(message_after_path(Status(ErrorCode::kIo, "/d/a\\0b: gone"), nul), "gone");
  // Another path's message is left whole.
  EXPECT_EQ(message_after_path(file_error(ErrorCode::kIo, "/x", "gone"), "/y"), "/x: gone");
}

}  // namespace
}  // namespace shardload
