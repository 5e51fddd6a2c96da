// SPDX-License-Identifier: Apache-2.0
// The standalone value parsers (shared with the CLI's overrides) and the
// path / CIDR / port helpers.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "policy/public_suffix.h"
#include "policy/values.h"

namespace agentcage::policy {
namespace {

using namespace std::chrono_literals;

template <class T>
std::string error_of(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.error().message;
}

#define EXPECT_ERROR(expr, substring)                                     \
  do {                                                                    \
    auto result_ = (expr);                                                \
    ASSERT_FALSE(result_.ok()) << #expr;                                  \
    EXPECT_NE(result_.error().message.find(substring), std::string::npos) \
        << #expr << ": " << result_.error().message;                      \
  } while (0)

TEST(ParseSize, PlainBytesAndUnits) {
  EXPECT_EQ(*parse_size("1"), 1u);
  EXPECT_EQ(*parse_size("1073741824"), 1073741824u);
  EXPECT_EQ(*parse_size("1K"), 1000u);
  EXPECT_EQ(*parse_size("2M"), 2000000u);
  EXPECT_EQ(*parse_size("3G"), 3000000000u);
  EXPECT_EQ(*parse_size("4T"), 4000000000000u);
  EXPECT_EQ(*parse_size("1Ki"), 1024u);
  EXPECT_EQ(*parse_size("512Mi"), 512ull << 20);
  EXPECT_EQ(*parse_size("3Gi"), 3ull << 30);
  EXPECT_EQ(*parse_size("2Ti"), 2ull << 40);
  EXPECT_EQ(*parse_size("007Mi"), 7ull << 20);
}

TEST(ParseSize, LargestValuesAndOverflow) {
  EXPECT_EQ(*parse_size("18446744073709551615"), UINT64_MAX);
  EXPECT_ERROR(parse_size("18446744073709551616"), "too large (at most 16 EiB)");
  EXPECT_ERROR(parse_size("99999999999999999999999999999"), "too large");
  EXPECT_EQ(*parse_size("16777215Ti"), 16777215ull << 40);
  EXPECT_ERROR(parse_size("16777216Ti"), "too large");  // exactly 2^64
  EXPECT_ERROR(parse_size("18446744073709552T"), "too large");
}

TEST(ParseSize, Rejects) {
  EXPECT_ERROR(parse_size(""), "empty size");
  EXPECT_ERROR(parse_size("0"), "greater than 0");
  EXPECT_ERROR(parse_size("0Ti"), "greater than 0");
  EXPECT_ERROR(parse_size("Mi"), "'Mi' is not a size");
  EXPECT_ERROR(parse_size("-1"), "is not a size");
  EXPECT_ERROR(parse_size("+1"), "is not a size");
  EXPECT_ERROR(parse_size(" 1"), "is not a size");
  EXPECT_ERROR(parse_size("1 Mi"), "unknown unit ' Mi'");
  EXPECT_ERROR(parse_size("1.5Gi"), "unknown unit '.5Gi'");
  EXPECT_ERROR(parse_size("512MB"), "unknown unit 'MB'");
  EXPECT_ERROR(parse_size("512mi"), "unknown unit 'mi'");
  EXPECT_ERROR(parse_size("1Pi"), "unknown unit 'Pi'");
  EXPECT_ERROR(parse_size("1k"), "use K, M, G, T, Ki, Mi, Gi or Ti");
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(*parse_duration("30s"), 30s);
  EXPECT_EQ(*parse_duration("500ms"), 500ms);
  EXPECT_EQ(*parse_duration("5m"), 5min);
  EXPECT_EQ(*parse_duration("1h"), 1h);
  EXPECT_EQ(*parse_duration("1h30m"), 90min);
  EXPECT_EQ(*parse_duration("1h2m3s4ms"), 1h + 2min + 3s + 4ms);
  EXPECT_EQ(*parse_duration("1m500ms"), 60500ms);
  EXPECT_EQ(*parse_duration("90m"), 90min);  // a unit need not be "normalised"
  EXPECT_EQ(*parse_duration("168h"), 168h);  // exactly 7 days
  EXPECT_EQ(*parse_duration("167h59m59s1000ms"), 168h);
}

TEST(ParseDuration, LimitsAndOverflow) {
  EXPECT_ERROR(parse_duration("168h1ms"), "too long (at most 7 days)");
  EXPECT_ERROR(parse_duration("604800001ms"), "too long");
  EXPECT_ERROR(parse_duration("99999999999999999999999h"), "too long");
  EXPECT_ERROR(parse_duration("18446744073709551615ms"), "too long");
  EXPECT_ERROR(parse_duration("0s"), "greater than 0");
  EXPECT_ERROR(parse_duration("0h0m"), "greater than 0");
}

TEST(ParseDuration, Rejects) {
  EXPECT_ERROR(parse_duration(""), "empty duration");
  EXPECT_ERROR(parse_duration("30"), "has no unit");
  EXPECT_ERROR(parse_duration("s"), "is not a duration");
  EXPECT_ERROR(parse_duration("1d"), "unknown unit 'd'");
  EXPECT_ERROR(parse_duration("1.5h"), "unknown unit '.'");
  EXPECT_ERROR(parse_duration("30S"), "unknown unit 'S'");
  EXPECT_ERROR(parse_duration("30 s"), "unknown unit ' s'");
  EXPECT_ERROR(parse_duration("-5s"), "is not a duration");
  EXPECT_ERROR(parse_duration("30s1m"), "largest to smallest");
  EXPECT_ERROR(parse_duration("1m1m"), "largest to smallest");
  EXPECT_ERROR(parse_duration("1h30"), "has no unit");
}

TEST(ParseMode, TwoWordsAndADidYouMean) {
  EXPECT_EQ(*parse_mode("enforce"), Mode::enforce);
  EXPECT_EQ(*parse_mode("audit"), Mode::audit);
  EXPECT_ERROR(parse_mode("Audit"),
               "invalid mode 'Audit' (expected 'enforce' or 'audit') (did you mean 'audit'?)");
  EXPECT_ERROR(parse_mode("ENFORCE"), "did you mean 'enforce'?");
  EXPECT_ERROR(parse_mode(""), "invalid mode ''");
  EXPECT_ERROR(parse_mode("permissive"), "(expected 'enforce' or 'audit')");
}

TEST(ParseCpus, Decimals) {
  EXPECT_DOUBLE_EQ(*parse_cpus("1"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_cpus("0.5"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_cpus(".25"), 0.25);
  EXPECT_DOUBLE_EQ(*parse_cpus("2.0"), 2.0);
  EXPECT_DOUBLE_EQ(*parse_cpus("1024"), 1024.0);
  EXPECT_DOUBLE_EQ(*parse_cpus("0.001"), 0.001);
}

TEST(ParseCpus, Rejects) {
  EXPECT_ERROR(parse_cpus(""), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("0"), "greater than 0");
  EXPECT_ERROR(parse_cpus("0.000"), "greater than 0");
  EXPECT_ERROR(parse_cpus("1024.01"), "at most 1024");
  EXPECT_ERROR(parse_cpus("99999999999999999999999999"), "at most 1024");
  EXPECT_ERROR(parse_cpus("-1"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("1e3"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("inf"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("nan"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("."), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("1."), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("1.2.3"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus("500m"), "is not a number of CPUs");
  EXPECT_ERROR(parse_cpus(std::string(40, '1')), "is not a number of CPUs");
}

TEST(ParsePids, Range) {
  EXPECT_EQ(*parse_pids("1"), 1u);
  EXPECT_EQ(*parse_pids("64"), 64u);
  EXPECT_EQ(*parse_pids("4194304"), 4194304u);
  EXPECT_ERROR(parse_pids("4194305"), "at most 4194304");
  EXPECT_ERROR(parse_pids("18446744073709551616"), "at most 4194304");
  EXPECT_ERROR(parse_pids("0"), "at least 1");
  EXPECT_ERROR(parse_pids(""), "is not a positive integer");
  EXPECT_ERROR(parse_pids("many"), "'many' is not a positive integer");
  EXPECT_ERROR(parse_pids("-1"), "is not a positive integer");
  EXPECT_ERROR(parse_pids("1.0"), "is not a positive integer");
  EXPECT_ERROR(parse_pids("64 "), "is not a positive integer");
}

TEST(ParsePortRange, SinglesAndRanges) {
  auto one = parse_port_range("443");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->first, 443);
  EXPECT_EQ(one->last, 443);
  auto range = parse_port_range("8000-8100");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->first, 8000);
  EXPECT_EQ(range->last, 8100);
  auto all = parse_port_range("1-65535");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->first, 1);
  EXPECT_EQ(all->last, 65535);
  EXPECT_TRUE(parse_port_range("80-80").ok());
}

TEST(ParsePortRange, Rejects) {
  EXPECT_ERROR(parse_port_range("0"), "out of range 1..65535");
  EXPECT_ERROR(parse_port_range("65536"), "out of range");
  EXPECT_ERROR(parse_port_range("99999999999999999999999"), "out of range");
  EXPECT_ERROR(parse_port_range("0-10"), "out of range");
  EXPECT_ERROR(parse_port_range("10-0"), "out of range");
  EXPECT_ERROR(parse_port_range("100-10"), "is empty");
  EXPECT_ERROR(parse_port_range(""), "is not a port");
  EXPECT_ERROR(parse_port_range("-"), "is not a port");
  EXPECT_ERROR(parse_port_range("80-"), "is not a port");
  EXPECT_ERROR(parse_port_range("-80"), "is not a port");
  EXPECT_ERROR(parse_port_range("1-2-3"), "is not a port");
  EXPECT_ERROR(parse_port_range("http"), "is not a port");
  EXPECT_ERROR(parse_port_range("80 - 90"), "is not a port");
}

TEST(ParseCidr, Ipv4) {
  auto c = parse_cidr("10.20.0.0/16");
  ASSERT_TRUE(c.ok()) << error_of(c);
  EXPECT_EQ(c->family, AF_INET);
  EXPECT_EQ(c->prefix_len, 16);
  EXPECT_EQ(c->addr[0], 10);
  EXPECT_EQ(c->addr[1], 20);
  auto host = parse_cidr("192.0.2.7");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->prefix_len, 32);
  EXPECT_EQ(host->addr[3], 7);
  auto any = parse_cidr("0.0.0.0/0");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->prefix_len, 0);
  EXPECT_TRUE(parse_cidr("127.0.0.1/32").ok());
}

TEST(ParseCidr, Ipv6) {
  auto c = parse_cidr("2001:db8::/32");
  ASSERT_TRUE(c.ok()) << error_of(c);
  EXPECT_EQ(c->family, AF_INET6);
  EXPECT_EQ(c->prefix_len, 32);
  EXPECT_EQ(c->addr[0], 0x20);
  EXPECT_EQ(c->addr[1], 0x01);
  EXPECT_EQ(c->addr[2], 0x0d);
  EXPECT_EQ(c->addr[3], 0xb8);
  auto host = parse_cidr("::1");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->prefix_len, 128);
  EXPECT_TRUE(parse_cidr("::/0").ok());
  EXPECT_TRUE(parse_cidr("::ffff:10.0.0.0/104").ok());
}

TEST(ParseCidr, HostBitsNameTheNetwork) {
  EXPECT_ERROR(parse_cidr("10.20.1.0/16"), "the network address is 10.20.0.0/16");
  EXPECT_ERROR(parse_cidr("10.0.0.1/31"), "the network address is 10.0.0.0/31");
  EXPECT_ERROR(parse_cidr("1.2.3.4/0"), "the network address is 0.0.0.0/0");
  EXPECT_ERROR(parse_cidr("2001:db8::1/64"), "the network address is 2001:db8::/64");
}

TEST(ParseCidr, Rejects) {
  EXPECT_ERROR(parse_cidr(""), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("/8"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("10.0.0.256"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("10.0.0"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("010.0.0.1"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("example.com"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("fe80::1%eth0"), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr(std::string("10.0.0.1\0junk", 13)), "is not an IPv4 or IPv6 address");
  EXPECT_ERROR(parse_cidr("10.0.0.0/"), "is not a number");
  EXPECT_ERROR(parse_cidr("10.0.0.0/-1"), "is not a number");
  EXPECT_ERROR(parse_cidr("10.0.0.0/8/8"), "is not a number");
  EXPECT_ERROR(parse_cidr("10.0.0.0/33"), "larger than 32");
  EXPECT_ERROR(parse_cidr("::/129"), "larger than 128");
  EXPECT_ERROR(parse_cidr("::/99999999999999999999999"), "larger than 128");
}

TEST(ParseDomain, NamesAndWildcards) {
  auto d = parse_domain("API.Example.COM.");
  ASSERT_TRUE(d.ok()) << error_of(d);
  EXPECT_EQ(d->name, "api.example.com");
  EXPECT_FALSE(d->wildcard);
  d = parse_domain("*.Pkg.Example.org");
  ASSERT_TRUE(d.ok()) << error_of(d);
  EXPECT_EQ(d->name, "pkg.example.org");
  EXPECT_TRUE(d->wildcard);
  EXPECT_TRUE(parse_domain("*.allowed.test").ok()) << "a name in an unlisted top-level domain";
}

// A wildcard over a public suffix would allow every registrant's names: refused
// for both sections of the Public Suffix List, naming the suffix and what to
// write instead.
TEST(ParseDomain, WildcardOverAPublicSuffixIsRefused) {
  EXPECT_ERROR(parse_domain("*.co.uk"),
               "'*.co.uk' is every name under 'co.uk', a public suffix (Public Suffix List, ICANN section: "
               "anyone can register a domain under it); name the domain you mean under it, e.g. "
               "\"*.example.co.uk\", or the exact host");
  EXPECT_ERROR(parse_domain("*.github.io"),
               "'*.github.io' is every name under 'github.io', a public suffix (Public Suffix List, private "
               "section: its operator gives names under it to anyone); name the domain you mean under it, "
               "e.g. \"*.example.github.io\", or the exact host");
  EXPECT_ERROR(parse_domain("*.s3.amazonaws.com"), "under 's3.amazonaws.com', a public suffix");
  EXPECT_ERROR(parse_domain("*.githubusercontent.com"), "under 'githubusercontent.com', a public suffix");
  // Case and a trailing dot change nothing: the list is asked about the name
  // the rule keeps.
  EXPECT_ERROR(parse_domain("*.CO.UK."), "'*.CO.UK.' is every name under 'co.uk', a public suffix");
  // The list's own wildcard rules count ("*.kawasaki.jp": every name under
  // kawasaki.jp is a suffix), and so do its exceptions ("!city.kawasaki.jp").
  EXPECT_ERROR(parse_domain("*.foo.kawasaki.jp"), "under 'foo.kawasaki.jp', a public suffix");
  EXPECT_TRUE(parse_domain("*.city.kawasaki.jp").ok());
}

TEST(ParseDomain, WildcardUnderAPublicSuffixIsAccepted) {
  for (const char* text : {"*.example.co.uk", "*.example.github.io", "*.bucket.s3.amazonaws.com",
                           "*.a.b.example.co.uk", "*.amazonaws.com"}) {
    auto d = parse_domain(text);
    ASSERT_TRUE(d.ok()) << text << ": " << error_of(d);
    EXPECT_TRUE(d->wildcard);
  }
}

// A wildcard over a registrant's domain is accepted, but the names under
// its operator's own public suffixes below it are not the registrant's: the
// run's resolver asks which suffix a matched name is under.
TEST(PublicSuffixBelow, NamesUnderTheOperatorsSuffixesBelowAWildcardsBase) {
  const auto below = [](std::string_view name, std::string_view base) {
    auto r = public_suffix_below(name, base);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : std::string("error");
  };
  // An EC2 instance's public name ("*.compute-1.amazonaws.com" makes every
  // such name a suffix of its own) and a bucket under "s3.amazonaws.com".
  EXPECT_EQ(below("ec2-203-0-113-7.compute-1.amazonaws.com", "amazonaws.com"),
            "ec2-203-0-113-7.compute-1.amazonaws.com");
  EXPECT_EQ(below("attacker-bucket.s3.amazonaws.com", "amazonaws.com"), "s3.amazonaws.com");
  EXPECT_EQ(below("S3.AmazonAWS.com", "amazonaws.com"), "s3.amazonaws.com");
  EXPECT_EQ(below("x.y.example.github.io", "github.io"), "");  // the suffix is the base itself
  // The registrant's own names.
  EXPECT_EQ(below("sts.amazonaws.com", "amazonaws.com"), "");
  EXPECT_EQ(below("a.b.pkg.example.org", "pkg.example.org"), "");
  EXPECT_EQ(below("a.pkg.wild.test", "wild.test"), "");  // a top-level domain the list does not name
  EXPECT_EQ(below("x.bucket.s3.amazonaws.com", "bucket.s3.amazonaws.com"), "");
}

// The top-level check stays first, with its own message, and covers top-level
// domains the list does not name.
TEST(ParseDomain, WildcardOverATopLevelDomain) {
  EXPECT_ERROR(parse_domain("*.com"),
               "'*.com' is every name in a top-level domain; name the domain under it");
  EXPECT_ERROR(parse_domain("*.internal"), "is every name in a top-level domain");
  EXPECT_ERROR(parse_domain("*.xn--p1ai"), "is every name in a top-level domain");
}

// An exact name matches that one name, held by the suffix's operator: a
// registry's (ICANN) suffix is refused as a mistake, an operator's (private)
// suffix is a real host and stays allowed.
TEST(ParseDomain, ExactPublicSuffix) {
  EXPECT_ERROR(parse_domain("co.uk"),
               "'co.uk' is a public suffix (Public Suffix List, ICANN section), a registry's name: the rule "
               "would match that one name, not the names under it; name the host you mean, e.g. "
               "\"api.example.co.uk\", or a domain's names, e.g. \"*.example.co.uk\"");
  EXPECT_ERROR(parse_domain("Co.UK."), "'Co.UK.' is a public suffix");
  for (const char* text : {"s3.amazonaws.com", "github.io", "example.co.uk", "www.gov.uk"}) {
    auto d = parse_domain(text);
    ASSERT_TRUE(d.ok()) << text << ": " << error_of(d);
    EXPECT_FALSE(d->wildcard);
  }
}

// International names are written in their punycode form (the Unicode form is
// refused before the list is asked), and the list knows them in that form.
TEST(ParseDomain, PunycodeNamesAgainstTheList) {
  EXPECT_ERROR(parse_domain("*.\u516c\u53f8.cn"), "xn-- (punycode)");
  EXPECT_ERROR(parse_domain("*.xn--55qx5d.cn"), "every name under 'xn--55qx5d.cn', a public suffix");
  EXPECT_ERROR(parse_domain("*.XN--55QX5D.CN"), "every name under 'xn--55qx5d.cn', a public suffix");
  EXPECT_ERROR(parse_domain("xn--55qx5d.cn"),
               "'xn--55qx5d.cn' is a public suffix (Public Suffix List, ICANN");
  EXPECT_TRUE(parse_domain("*.example.xn--55qx5d.cn").ok());
  EXPECT_TRUE(parse_domain("*.xn--bcher-kva.example").ok());
}

TEST(Paths, Normalisation) {
  EXPECT_EQ(*normalize_path("/", 246), "/");
  EXPECT_EQ(*normalize_path("//", 246), "/");
  EXPECT_EQ(*normalize_path("/./.", 246), "/");
  EXPECT_EQ(*normalize_path("/usr/lib/", 246), "/usr/lib");
  EXPECT_EQ(*normalize_path("//usr///lib//", 246), "/usr/lib");
  EXPECT_EQ(*normalize_path("/usr/./lib/.", 246), "/usr/lib");
  EXPECT_EQ(*normalize_path("/a/.b/..c/...", 246), "/a/.b/..c/...");  // only "." and ".." are special
  EXPECT_ERROR(normalize_path("/usr/..", 246), "'..' is not allowed");
  EXPECT_ERROR(normalize_path("/../etc", 246), "'..' is not allowed");
  EXPECT_ERROR(normalize_path("usr", 246), "relative path 'usr'");
  EXPECT_ERROR(normalize_path("", 246), "empty path");
  EXPECT_ERROR(normalize_path(std::string("/a\0b", 4), 246), "control character in path '/a\\x00b'");
  EXPECT_ERROR(normalize_path("/a\nb", 246), "control character");
}

TEST(Paths, LengthLimitAppliesAfterNormalisation) {
  const std::string longest = "/" + std::string(kMaxRulePathBytes - 1, 'a');
  EXPECT_EQ(*normalize_path(longest, kMaxRulePathBytes), longest);
  EXPECT_EQ(*normalize_path("/" + longest + "//", kMaxRulePathBytes), longest);
  EXPECT_ERROR(normalize_path(longest + "b", kMaxRulePathBytes), "at most 246 bytes");
  EXPECT_ERROR(normalize_path("/" + std::string(100000, 'a'), kMaxRulePathBytes), "is too long");
}

TEST(Paths, FilePaths) {
  auto abs = parse_file_path("/usr/lib/");
  ASSERT_TRUE(abs.ok());
  EXPECT_EQ(abs->path, "/usr/lib");
  EXPECT_FALSE(abs->in_workspace);
  auto ws = parse_file_path("${workspace}");
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(ws->path, "");
  EXPECT_TRUE(ws->in_workspace);
  auto ws_root = parse_file_path("${workspace}/./");
  ASSERT_TRUE(ws_root.ok());
  EXPECT_EQ(ws_root->path, "");
  auto sub = parse_file_path("${workspace}//a/b/");
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->path, "/a/b");
  EXPECT_TRUE(sub->in_workspace);
  EXPECT_TRUE(parse_file_path("/cost/$5").ok());  // a lone '$' is just a character

  EXPECT_ERROR(parse_file_path(""), "empty path");
  EXPECT_ERROR(parse_file_path("lib"), "start with ${workspace}");
  EXPECT_ERROR(parse_file_path("~/x"), "relative path '~/x'");
  EXPECT_ERROR(parse_file_path("${workspace}x"), "must be followed by '/'");
  EXPECT_ERROR(parse_file_path("${workspace}/${workspace}"), "only appear at the start");
  EXPECT_ERROR(parse_file_path("${workspace}/${tmp}"), "unknown variable '${tmp}'");
  EXPECT_ERROR(parse_file_path("/x/${workspace}"), "only appear at the start");
  EXPECT_ERROR(parse_file_path("${WORKSPACE}"), "unknown variable '${WORKSPACE}'");
  EXPECT_ERROR(parse_file_path("${workspace"), "unknown variable '${workspace'");
  EXPECT_ERROR(parse_file_path("${workspace}/a/../b"),
               "'..' is not allowed in paths, got '${workspace}/a/../b'");
}

TEST(Paths, ExecPaths) {
  EXPECT_EQ(*parse_exec_path("/usr//bin/python3"), "/usr/bin/python3");
  EXPECT_ERROR(parse_exec_path("python3"), "programs must be absolute paths");
  EXPECT_ERROR(parse_exec_path("${workspace}/run"), "not allowed in exec.allow");
  EXPECT_ERROR(parse_exec_path("/bin/${shell}"), "unknown variable '${shell}'");
  EXPECT_ERROR(parse_exec_path("/usr/bin/../bin/sh"), "'..' is not allowed");
}

TEST(Paths, UnixTargets) {
  auto path = parse_unix_target("/run//llm-proxy.sock");
  ASSERT_TRUE(path.ok());
  EXPECT_FALSE(path->abstract);
  EXPECT_EQ(path->name, "/run/llm-proxy.sock");
  auto abstract = parse_unix_target("@llm/proxy");
  ASSERT_TRUE(abstract.ok());
  EXPECT_TRUE(abstract->abstract);
  EXPECT_EQ(abstract->name, "llm/proxy");
  EXPECT_TRUE(parse_unix_target("@" + std::string(107, 'x')).ok());
  EXPECT_ERROR(parse_unix_target("@" + std::string(108, 'x')), "at most 107 bytes");
  EXPECT_TRUE(parse_unix_target("/" + std::string(106, 'x')).ok());
  EXPECT_ERROR(parse_unix_target("/" + std::string(107, 'x')), "at most 107 bytes");
  EXPECT_ERROR(parse_unix_target("@"), "is empty");
  EXPECT_ERROR(parse_unix_target("@a\tb"), "control character");
  EXPECT_ERROR(parse_unix_target("run/x.sock"), "absolute path or @name");
  EXPECT_ERROR(parse_unix_target("${workspace}/x.sock"), "variables are not allowed");
  EXPECT_ERROR(parse_unix_target(""), "absolute path or @name");
}

TEST(Quote, EscapesAndTruncates) {
  EXPECT_EQ(quote("abc"), "'abc'");
  EXPECT_EQ(quote("é"), "'é'");
  EXPECT_EQ(quote(std::string("a\0b\n", 4)), "'a\\x00b\\x0a'");
  EXPECT_EQ(quote("\xff"), "'\\xff'");
  EXPECT_EQ(quote(std::string(100, 'x'), 4), "'xxxx...'");
}

}  // namespace
}  // namespace agentcage::policy
