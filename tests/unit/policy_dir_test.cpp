// SPDX-License-Identifier: Apache-2.0
// The daemon's policy directory (daemon/policy_dir.h) without a kernel: a
// real directory of policy files driven through create, an invalid change, a
// fix, a rename and a delete, against a fake NamedSlots that records every
// map operation, and a listener that records the counter hooks in the same
// log, so the ordering rules are checked too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <agentcage/abi.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/configmap_volume.h"
#include "daemon/policy_dir.h"
#include "daemon/policy_watch.h"
#include "scope/slots.h"
#include "util/log.h"

namespace agentcage::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string policy_text(const std::string& name, const std::string& read = "/etc/hostname") {
  return "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: " + name +
         "}\nspec:\n  files:\n    read: [" + read + "]\n";
}

// The kernel's policy map, and a log of what was done to it.
class FakeSlots final : public NamedSlots {
 public:
  explicit FakeSlots(std::vector<std::string>& log) : log_(log) {}

  Result<std::vector<bpf::PolicyInfo>> policies() override {
    std::vector<bpf::PolicyInfo> out;
    for (const auto& [slot, p] : installed) out.push_back(p.info);
    return out;
  }
  Result<std::vector<bpf::ScopeInfo>> scopes() override { return scope_list; }
  Result<uint32_t> allocate(const std::vector<uint32_t>& reserved,
                            const std::function<Status(uint32_t)>& install) override {
    scope::SlotView view{*policies(), scope_list};
    auto slot = scope::choose_named_slot(view, reserved);
    if (!slot) return slot.error();
    log_.push_back("allocate " + std::to_string(*slot));
    if (Status st = install(*slot); !st) return st.error();
    return *slot;
  }
  Status put(uint32_t slot, const std::string& name, const bpf::CompiledPolicy& policy) override {
    if (fail_put) return Error{"no memory for the rules", ENOMEM};
    log_.push_back("put " + std::to_string(slot) + " " + name);
    installed[slot] = {bpf::PolicyInfo{slot, name, AC_POLICY_OWNER_NAMED, 0, 0}, policy.paths.size()};
    return {};
  }
  Status remove(uint32_t slot) override {
    log_.push_back("remove " + std::to_string(slot));
    installed.erase(slot);
    return {};
  }

  struct Installed {
    bpf::PolicyInfo info;
    size_t path_rules = 0;
  };
  std::map<uint32_t, Installed> installed;
  std::vector<bpf::ScopeInfo> scope_list;
  bool fail_put = false;

 private:
  std::vector<std::string>& log_;
};

class RecordingListener final : public PolicyDirListener {
 public:
  explicit RecordingListener(std::vector<std::string>& log) : log_(log) {}
  void reloaded(bool success) override { (success ? reloads_ok : reloads_failed)++; }
  void rejected(core::FailClosedReason reason) override {
    fail_closed.push_back(std::string(core::name(reason)));
  }
  void policies_loaded(size_t count) override { loaded = count; }
  void slot_named(uint32_t slot, const std::string& name) override { names[slot] = name; }
  void slot_fresh(uint32_t slot, const std::string& name) override {
    log_.push_back("baseline " + std::to_string(slot) + " " + name);
  }
  void before_slot_removed() override { log_.push_back("collect"); }
  void slot_removed(uint32_t slot) override { log_.push_back("forget " + std::to_string(slot)); }

  int reloads_ok = 0, reloads_failed = 0;
  std::vector<std::string> fail_closed;
  size_t loaded = 0;
  std::map<uint32_t, std::string> names;

 private:
  std::vector<std::string>& log_;
};

class PolicyDirReload : public ::testing::Test {
 protected:
  void SetUp() override {
    log::set_level(log::Level::off);
    root_ = fs::temp_directory_path() / ("ac-policy-dir-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "policies");
    fs::create_directories(root_ / "state");
  }
  void TearDown() override {
    fs::remove_all(root_);
    log::set_level(log::Level::info);
  }

  std::string dir() const { return (root_ / "policies").string(); }
  std::string file(const std::string& name) const { return (root_ / "policies" / name).string(); }
  // Written like a deployment tool does: a temporary file renamed into place.
  void write(const std::string& name, const std::string& text) {
    const fs::path tmp = root_ / "policies" / (".tmp-" + name);
    std::ofstream(tmp) << text;
    fs::rename(tmp, root_ / "policies" / name);
  }
  json state_file() const {
    std::ifstream in(root_ / "state" / "daemon-policies.json");
    return json::parse(in, nullptr, false);
  }
  std::unique_ptr<PolicyDirectory> make_dir() {
    auto d = std::make_unique<PolicyDirectory>(dir(), (root_ / "state").string(), listener_);
    d->set_slots(&slots_);
    return d;
  }
  // The status entry of one file.
  static json entry(const PolicyDirectory& d, const std::string& policy) {
    for (const auto& f : d.status_json())
      if (f["policy"] == policy) return f;
    return nullptr;
  }
  std::vector<std::string> take_log() { return std::exchange(log_, {}); }

  fs::path root_;
  std::vector<std::string> log_;
  FakeSlots slots_{log_};
  RecordingListener listener_{log_};
};

TEST_F(PolicyDirReload, CreateInstallsIntoAFreshSlotAndRecordsItInTheStateFile) {
  write("web.yaml", policy_text("web"));
  write("README", "not a policy");
  write(".hidden.yaml", policy_text("hidden"));
  auto d = make_dir();
  d->full_scan();
  // The fresh slot's counters are baselined before the policy goes in.
  EXPECT_EQ(take_log(), (std::vector<std::string>{"allocate 0", "baseline 0 web", "put 0 web"}));
  EXPECT_EQ(d->named_slot("web"), 0u);
  EXPECT_FALSE(d->named_slot("hidden"));
  EXPECT_EQ(d->loaded_count(), 1u);
  EXPECT_EQ(listener_.loaded, 1u);
  EXPECT_EQ(listener_.reloads_ok, 1);
  EXPECT_EQ(listener_.names[0], "web");
  const json e = entry(*d, "web");
  EXPECT_EQ(e["state"], "loaded");
  EXPECT_EQ(e["slot"], 0);
  EXPECT_EQ(e["file"], file("web.yaml"));
  EXPECT_TRUE(e["error"].is_null());
  EXPECT_EQ(d->status_json().size(), 1u);
  EXPECT_EQ(state_file(), (json{{"web", 0}}));

  // A second policy gets the next slot; an unchanged file is not re-read.
  write("db.yaml", policy_text("db"));
  d->full_scan();
  EXPECT_EQ(take_log(), (std::vector<std::string>{"allocate 1", "baseline 1 db", "put 1 db"}));
  EXPECT_EQ(state_file(), (json{{"web", 0}, {"db", 1}}));
  // Re-read on request (SIGHUP, the reload op), but the same rules are not
  // written again.
  d->rescan_all();
  EXPECT_TRUE(take_log().empty());
  EXPECT_EQ(listener_.reloads_ok, 4);
}

// The daemon's attach asks this before it confines a cgroup under a named
// policy: the rules of the content that enforces, not of a rejected edit.
TEST_F(PolicyDirReload, AWorkspaceIsCheckedAgainstTheLoadedRules) {
  write(
      "tools.yaml",
      "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: tools}\nspec:\n  exec: {allow: [/usr/bin]}\n"
      "  files: {write: [\"${workspace}\"], deny: [\"**/.ssh\"]}\n");
  auto d = make_dir();
  d->full_scan();
  ASSERT_EQ(d->named_slot("tools"), 0u);
  const std::string bin = fs::canonical("/usr/bin").string();
  auto overlap = d->workspace_problem("tools", bin + "/ws");
  ASSERT_TRUE(overlap);
  EXPECT_NE(overlap->find("and exec.allow " + bin + " of policy tools overlap"), std::string::npos)
      << *overlap;
  auto named = d->workspace_problem("tools", "/home/u/.ssh/ws");
  ASSERT_TRUE(named);
  EXPECT_NE(named->find("files.deny '**/.ssh'"), std::string::npos) << *named;
  EXPECT_FALSE(d->workspace_problem("tools", "/srv/ws"));
  EXPECT_FALSE(d->workspace_problem("unknown", bin + "/ws"));
}

// A policy with domain rules loads (runs get a resolver each) and says where
// its first one is, so the daemon's attach can refuse it with the place.
TEST_F(PolicyDirReload, ADomainRuleIsLoadedAndNamedForAttach) {
  write("named.yaml",
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: named}\nspec:\n  network:\n    allow:\n"
        "      - {cidr: 10.0.0.0/8}\n      - {domain: api.example.com, ports: [443]}\n");
  write("plain.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: plain}\nspec: {}\n");
  auto d = make_dir();
  d->full_scan();
  ASSERT_TRUE(d->named_slot("named"));
  EXPECT_NE(d->domain_rule("named").find("named.yaml:8:9: domain api.example.com"), std::string::npos)
      << d->domain_rule("named");
  EXPECT_EQ(d->domain_rule("plain"), "");
  EXPECT_EQ(d->domain_rule("unknown"), "");
}

// A reload governs the scopes already on the slot: rules that would deny a
// live scope's workspace whole, or let it run what it writes there, are
// refused, and the rules that enforce stay.
TEST_F(PolicyDirReload, AReloadThatALiveScopesWorkspaceCannotTakeIsRejected) {
  write("web.yaml", policy_text("web"));
  auto d = make_dir();
  d->full_scan();
  ASSERT_EQ(d->named_slot("web"), 0u);
  slots_.scope_list.push_back(bpf::ScopeInfo{77, 77, 0, 2, "/srv/agent/.cache/ws"});
  take_log();
  write("web.yaml",
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: web}\nspec:\n  files:\n    read: [/etc]\n"
        "    deny: [\"**/.cache\"]\n");
  d->apply_file("web.yaml");
  EXPECT_TRUE(take_log().empty());  // nothing installed
  json e = entry(*d, "web");
  EXPECT_EQ(e["state"], "rejected_previous_enforcing");
  EXPECT_NE(e["error"].get<std::string>().find("files.deny '**/.cache' of policy web denies"),
            std::string::npos)
      << e;
  EXPECT_NE(e["error"].get<std::string>().find("cgroup id 77, has that workspace"), std::string::npos) << e;
  // Rules the workspace can take go in.
  write("web.yaml",
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: web}\nspec:\n  files:\n    read: [/etc]\n"
        "    deny: [\"**/.env\"]\n");
  d->apply_file("web.yaml");
  EXPECT_EQ(take_log(), (std::vector<std::string>{"put 0 web"}));
  EXPECT_EQ(entry(*d, "web")["state"], "loaded");
}

TEST_F(PolicyDirReload, InvalidChangeIsRejectedLocatedAndThePreviousVersionKeepsEnforcing) {
  write("web.yaml", policy_text("web"));
  auto d = make_dir();
  d->full_scan();
  take_log();

  write("web.yaml",
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: web}\nspec:\n  files:\n    raed: [/etc]\n");
  d->apply_file("web.yaml");
  EXPECT_TRUE(take_log().empty());  // nothing installed, nothing removed
  EXPECT_EQ(d->named_slot("web"), 0u);
  EXPECT_EQ(slots_.installed.at(0).path_rules, 1u);
  json e = entry(*d, "web");
  EXPECT_EQ(e["state"], "rejected_previous_enforcing");
  EXPECT_EQ(e["slot"], 0);
  EXPECT_EQ(e["error"].get<std::string>().rfind(file("web.yaml") + ":6:5: unknown key 'raed'", 0), 0u) << e;
  EXPECT_EQ(listener_.reloads_failed, 1);
  EXPECT_EQ(listener_.fail_closed, (std::vector<std::string>{"policy_invalid"}));

  // A name that does not match the file: rejected too, located at the name.
  write("web.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata:\n  name: other\nspec: {}\n");
  d->apply_file("web.yaml");
  EXPECT_TRUE(take_log().empty());
  e = entry(*d, "web");
  EXPECT_EQ(e["state"], "rejected_previous_enforcing");
  EXPECT_EQ(e["error"],
            file("web.yaml") +
                ":4:9: metadata.name 'other' does not match the file name (the daemon names a policy by "
                "its file: expected 'web')");

  // Fixed: swapped into the same slot, in place.
  write("web.yaml", policy_text("web", "/etc/hostname, /etc/passwd"));
  d->apply_file("web.yaml");
  EXPECT_EQ(take_log(), (std::vector<std::string>{"put 0 web"}));
  e = entry(*d, "web");
  EXPECT_EQ(e["state"], "loaded");
  EXPECT_TRUE(e["error"].is_null());
  EXPECT_EQ(slots_.installed.at(0).path_rules, 2u);
  EXPECT_EQ(state_file(), (json{{"web", 0}}));
}

// A policy that includes another changes with it: the daemon parses it
// again when the included file changes, and a change that breaks the
// include is a rejected change like any other (the previous rules stay).
TEST_F(PolicyDirReload, AChangeToAnIncludedFileReloadsThePoliciesThatIncludeIt) {
  write("base.yaml", policy_text("base"));
  write("web.yaml",
        "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: web}\ninclude: [base.yaml]\n"
        "spec:\n  files:\n    read: [/srv]\n");
  write("other.yaml", policy_text("other"));
  auto d = make_dir();
  d->full_scan();
  const uint32_t base = *d->named_slot("base"), web = *d->named_slot("web"), other = *d->named_slot("other");
  EXPECT_EQ(slots_.installed.at(web).path_rules, 2u);  // /srv and base's /etc
  take_log();

  // base gains a rule: both base and web are installed again, other is not.
  write("base.yaml", policy_text("base", "/etc/hostname, /etc/passwd"));
  d->apply_file("base.yaml");
  EXPECT_EQ(take_log(), (std::vector<std::string>{"put " + std::to_string(base) + " base",
                                                  "put " + std::to_string(web) + " web"}));
  EXPECT_EQ(slots_.installed.at(web).path_rules, 3u);
  EXPECT_EQ(slots_.installed.at(other).path_rules, 1u);

  // base breaks: both rejected, both keep enforcing their previous rules.
  write("base.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: base}\nspec: {filez: {}}\n");
  d->apply_file("base.yaml");
  EXPECT_TRUE(take_log().empty());
  EXPECT_EQ(entry(*d, "web")["state"], "rejected_previous_enforcing");
  EXPECT_NE(entry(*d, "web")["error"].get<std::string>().find("base.yaml"), std::string::npos)
      << entry(*d, "web");
  EXPECT_EQ(slots_.installed.at(web).path_rules, 3u);

  // Fixed again: web follows without being touched itself.
  write("base.yaml", policy_text("base"));
  d->apply_file("base.yaml");
  EXPECT_EQ(take_log(), (std::vector<std::string>{"put " + std::to_string(base) + " base",
                                                  "put " + std::to_string(web) + " web"}));
  EXPECT_EQ(entry(*d, "web")["state"], "loaded");
  EXPECT_EQ(slots_.installed.at(web).path_rules, 2u);

  // base removed: its own policy goes; web is rejected and keeps its rules.
  fs::remove(file("base.yaml"));
  d->apply_file("base.yaml");
  EXPECT_EQ(entry(*d, "web")["state"], "rejected_previous_enforcing");
  EXPECT_FALSE(d->named_slot("base").has_value());
  EXPECT_EQ(slots_.installed.at(web).path_rules, 2u);
}

TEST_F(PolicyDirReload, ANewFileThatDoesNotValidateIsNotLoaded) {
  write("web.yaml", "apiVersion: agentcage/v1\nkind: Policy\nmetadata: {name: web}\nspec: [\n");
  auto d = make_dir();
  d->full_scan();
  EXPECT_TRUE(take_log().empty());
  EXPECT_FALSE(d->named_slot("web"));
  const json e = entry(*d, "web");
  EXPECT_EQ(e["state"], "rejected");
  EXPECT_TRUE(e["slot"].is_null());
  EXPECT_EQ(e["error"].get<std::string>().rfind(file("web.yaml") + ":", 0), 0u) << e;
  EXPECT_EQ(listener_.loaded, 0u);
}

TEST_F(PolicyDirReload, DeleteCollectsCountersThenRemovesTheSlot) {
  write("web.yaml", policy_text("web"));
  auto d = make_dir();
  d->full_scan();
  take_log();
  fs::remove(file("web.yaml"));
  d->apply_file("web.yaml");  // what inotify's IN_DELETE leads to
  // The slot's last decisions are collected before it goes (rule 1).
  EXPECT_EQ(take_log(), (std::vector<std::string>{"collect", "remove 0", "forget 0"}));
  EXPECT_FALSE(d->named_slot("web"));
  EXPECT_TRUE(d->status_json().empty());
  EXPECT_EQ(listener_.loaded, 0u);
  EXPECT_EQ(state_file(), json::object());
  // A deleted file that never loaded removes nothing.
  write("bad.yaml", "spec: [\n");
  d->full_scan();
  fs::remove(file("bad.yaml"));
  d->full_scan();
  EXPECT_TRUE(take_log().empty());
}

TEST_F(PolicyDirReload, RenameRemovesTheOldPolicyAndNeverReusesASlotAScopeStillPointsAt) {
  write("web.yaml", policy_text("web"));
  auto d = make_dir();
  d->full_scan();
  slots_.scope_list.push_back(bpf::ScopeInfo{77, 77, 0, 2, ""});  // a scope attached to web
  take_log();

  fs::rename(file("web.yaml"), file("site.yaml"));
  d->apply_file("web.yaml");   // IN_MOVED_FROM
  d->apply_file("site.yaml");  // IN_MOVED_TO
  // The old policy goes; the renamed file still says "web", so it is
  // rejected at its name.
  EXPECT_EQ(take_log(), (std::vector<std::string>{"collect", "remove 0", "forget 0"}));
  EXPECT_FALSE(d->named_slot("web"));
  json e = entry(*d, "site");
  EXPECT_EQ(e["state"], "rejected");
  EXPECT_EQ(e["error"].get<std::string>().rfind(file("site.yaml") + ":3:18: metadata.name 'web'", 0), 0u)
      << e;

  // Renamed inside too: installed, but not into slot 0, which the scope
  // still points at (it fails closed there, and must keep failing closed).
  write("site.yaml", policy_text("site"));
  d->apply_file("site.yaml");
  EXPECT_EQ(take_log(), (std::vector<std::string>{"allocate 1", "baseline 1 site", "put 1 site"}));
  EXPECT_EQ(entry(*d, "site")["state"], "loaded");
  EXPECT_EQ(state_file(), (json{{"site", 1}}));
}

TEST_F(PolicyDirReload, AFailedInstallIsRejectedAsInternal) {
  write("web.yaml", policy_text("web"));
  slots_.fail_put = true;
  auto d = make_dir();
  d->full_scan();
  EXPECT_FALSE(d->named_slot("web"));
  const json e = entry(*d, "web");
  EXPECT_EQ(e["state"], "rejected");
  EXPECT_EQ(e["error"], file("web.yaml") + ": installing the policy: no memory for the rules");
  EXPECT_EQ(listener_.fail_closed, (std::vector<std::string>{"internal"}));
}

TEST_F(PolicyDirReload, ARestartAdoptsItsSlotsAndRemovesThoseWhoseFileIsGone) {
  write("web.yaml", policy_text("web"));
  write("db.yaml", policy_text("db"));
  {
    auto first = make_dir();
    first->full_scan();
  }
  EXPECT_EQ(state_file(), (json{{"db", 0}, {"web", 1}}));
  // While no daemon ran: db.yaml was deleted and web.yaml changed; a
  // transient policy (a run's) sits in slot 2.
  fs::remove(file("db.yaml"));
  write("web.yaml", policy_text("web", "/etc/hostname, /etc/passwd"));
  slots_.installed[2] = {bpf::PolicyInfo{2, "run", AC_POLICY_OWNER_TRANSIENT, 0, 0}, 1};
  take_log();

  auto second = make_dir();
  second->load_state_file();
  second->adopt_named_slots();
  second->full_scan();
  // web is swapped in place in its slot; db's slot goes, counters first;
  // the run's transient slot is not the daemon's to touch.
  EXPECT_EQ(take_log(), (std::vector<std::string>{"put 1 web", "collect", "remove 0"}));
  EXPECT_EQ(second->named_slot("web"), 1u);
  EXPECT_FALSE(second->named_slot("db"));
  EXPECT_EQ(slots_.installed.at(1).path_rules, 2u);
  EXPECT_TRUE(slots_.installed.count(2));
  EXPECT_EQ(state_file(), (json{{"web", 1}}));
}

// The one policy-name rule (policy/name.h) for file names: a file whose stem
// is not a policy name is rejected with how to rename it, never installed.
TEST_F(PolicyDirReload, AFileWhoseNameIsNotAPolicyNameIsRejected) {
  write("web.yaml", policy_text("web"));
  write("Bad_Name.yaml", policy_text("bad-name"));
  auto d = make_dir();
  d->full_scan();
  EXPECT_EQ(take_log(), (std::vector<std::string>{"allocate 0", "baseline 0 web", "put 0 web"}));
  EXPECT_FALSE(d->named_slot("Bad_Name"));
  EXPECT_FALSE(d->named_slot("bad-name"));
  const json e = entry(*d, "Bad_Name");
  EXPECT_EQ(e["state"], "rejected");
  const std::string error = e["error"].get<std::string>();
  EXPECT_NE(error.find("Bad_Name.yaml: the file name 'Bad_Name.yaml' does not name a policy"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("(rename it to 'bad-name.yaml')"), std::string::npos) << error;
  EXPECT_EQ(listener_.fail_closed, (std::vector<std::string>{"policy_invalid"}));
}

// A Kubernetes ConfigMap mounted as the policy directory: every NAME.yaml is
// a symbolic link through ..data into a ..TIMESTAMP directory, and an update
// renames a new ..data into place. Driven as the daemon drives it (policy
// watch events -> full_scan / apply_file), looking after every step of the
// kubelet's update, in both orders kubelets link new keys.
TEST_F(PolicyDirReload, AConfigMapSwapUpdatesAddsAndRemovesPoliciesAndItsDotEntriesAreNoPolicies) {
  using Volume = test_support::ConfigMapVolume;
  using Step = Volume::Step;
  for (const bool links_first : {false, true}) {
    SCOPED_TRACE(links_first ? "new keys linked before the switch" : "new keys linked after the switch");
    fs::remove_all(root_ / "policies");
    fs::remove_all(root_ / "state");
    fs::create_directories(root_ / "state");
    slots_.installed.clear();
    Volume volume(root_ / "policies");
    volume.write({{"web.yaml", policy_text("web")}, {"db.yaml", policy_text("db")}});
    auto d = make_dir();
    d->full_scan();
    // The links are followed: both load, and only they are files of the directory.
    ASSERT_TRUE(d->named_slot("web") && d->named_slot("db"));
    std::set<std::string> listed;
    for (const auto& f : d->status_json()) listed.insert(fs::path(f["file"].get<std::string>()).filename());
    EXPECT_EQ(listed, (std::set<std::string>{"db.yaml", "web.yaml"}));
    const uint32_t web = *d->named_slot("web");
    EXPECT_EQ(slots_.installed.at(web).path_rules, 1u);
    take_log();

    PolicyWatch watch(dir());
    ASSERT_TRUE(watch.watch());
    std::map<Step, PolicyDirChanges> seen;
    std::map<Step, std::set<std::string>> loaded;
    volume.write(
        {{"web.yaml", policy_text("web", "/etc/hostname, /etc/passwd")}, {"api.yaml", policy_text("api")}},
        [&](Step step) {
          PolicyDirChanges changes = watch.read();  // what the daemon's loop does with them
          if (changes.rescan) d->full_scan();
          for (const auto& name : changes.files) d->apply_file(name);
          seen[step] = changes;
          for (const auto& [slot, name] : listener_.names)
            if (d->named_slot(name) == slot) loaded[step].insert(name);
        },
        links_first);

    // Nothing happens before the switch: the new directory and ..data_tmp
    // are no policies, and a link that dangles is nothing to load.
    EXPECT_FALSE(seen[Step::wrote_data_dir].rescan);
    EXPECT_EQ(loaded[Step::wrote_data_dir], (std::set<std::string>{"db", "web"}));
    // The ..data rename is one rescan: web takes its new rules in its slot,
    // db (its link dangles now) goes, and api loads when it is linked.
    EXPECT_TRUE(seen[Step::switched].rescan);
    EXPECT_EQ(d->named_slot("web"), web);
    EXPECT_EQ(slots_.installed.at(web).path_rules, 2u);
    EXPECT_EQ(loaded[Step::switched],
              (links_first ? std::set<std::string>{"api", "web"} : std::set<std::string>{"web"}));
    EXPECT_EQ(loaded[Step::linked_new_keys], (std::set<std::string>{"api", "web"}));
    if (!links_first) {
      EXPECT_EQ(seen[Step::linked_new_keys].files, (std::set<std::string>{"api.yaml"}));
    }
    EXPECT_EQ(seen[Step::unlinked_old_keys].files, (std::set<std::string>{"db.yaml"}));
    EXPECT_TRUE(seen[Step::removed_old_dir].rescan);
    EXPECT_EQ(loaded[Step::removed_old_dir], (std::set<std::string>{"api", "web"}));
    EXPECT_FALSE(d->named_slot("db"));
    listed.clear();
    for (const auto& f : d->status_json()) listed.insert(fs::path(f["file"].get<std::string>()).filename());
    EXPECT_EQ(listed, (std::set<std::string>{"api.yaml", "web.yaml"}));
    EXPECT_EQ(state_file(), (json{{"api", *d->named_slot("api")}, {"web", web}}));
  }
}

TEST_F(PolicyDirReload, NothingIsInstalledBeforeTheKernelSideIsThere) {
  write("web.yaml", policy_text("web"));
  PolicyDirectory d(dir(), (root_ / "state").string(), listener_);
  d.full_scan();
  d.apply_file("web.yaml");
  EXPECT_TRUE(take_log().empty());
  EXPECT_TRUE(d.status_json().empty());
}

}  // namespace
}  // namespace agentcage::daemon
