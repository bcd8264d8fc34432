// util.h — small helpers shared by the compiler: files, hashing, names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ckc {

std::string read_file(const std::string &path);  // throws Error(IO) naming the path
uint64_t fnv1a64(const std::string &bytes);
std::string hex64(uint64_t v);

std::string join(const std::vector<std::string> &parts, const std::string &sep);
bool starts_with(const std::string &s, const std::string &prefix);
bool ends_with(const std::string &s, const std::string &suffix);
std::string replace_all(std::string s, const std::string &from, const std::string &to);
std::string to_lower(std::string s);  // ASCII
// " (did you mean 'fuse_dags'?)" when one of `known` is a close spelling of `name` (edit distance, case
// ignored), else "": for errors about unknown names.
std::string did_you_mean(const std::string &name, const std::vector<std::string> &known);

// A valid C identifier from any name: non [A-Za-z0-9_] become '_', runs of
// '_' collapse, a leading digit gets a '_' prefix. Braces and commas (from
// fused names like "self_attn.{q,k,v}_proj.weight") are dropped first so the
// result reads "self_attn_qkv_proj_weight".
std::string c_identifier(const std::string &name);
// A C string literal holding s: "a\"b" with quotes, backslashes and control bytes escaped.
std::string c_string(const std::string &s);

// "self_attn.q_proj.weight" + "self_attn.k_proj.weight" -> "self_attn.{q,k}_proj.weight"
std::string merge_names(const std::vector<std::string> &names);

// Writes several output files so that either all appear or none does: each is
// written to a temporary next to its destination, and only renamed into place
// by commit(). Destroying an uncommitted set removes the temporaries.
class AtomicFiles {
public:
    AtomicFiles() = default;
    AtomicFiles(const AtomicFiles &) = delete;
    AtomicFiles &operator=(const AtomicFiles &) = delete;
    ~AtomicFiles();
    void add(const std::string &path, const std::string &contents);  // throws Error(IO)
    void commit();                                                    // throws Error(IO)

private:
    struct Pending { std::string path, tmp; };
    std::vector<Pending> pending_;
    bool committed_ = false;
};

std::string absolute_path(const std::string &path);
// The path rule's opt-out (ck_path_in_folder): the environment says CK_WEIGHTS_ANY_PATH=1, which ckc compile
// --allow-outside-paths sets; the runtime's checkpoint reader reads the same variable.
bool weights_any_path();
bool is_directory(const std::string &path);
bool is_file(const std::string &path);

// "1.5 KiB", "12 B": bytes in the largest binary unit below 1024 of it.
std::string human_bytes(double bytes);

}  // namespace ckc
