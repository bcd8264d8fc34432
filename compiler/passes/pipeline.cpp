#include <ostream>

#include "ir/printer.h"
#include "passes/pass.h"
#include "support/error.h"
#include "support/util.h"

namespace ckc {

const std::vector<Pass> &default_pipeline()
{
    static const std::vector<Pass> passes = {
        {"fuse_matmul_add", "fold a bias or residual ADD into the GEMM that feeds it (sgemm beta = 1)", fuse_matmul_add},
        {"fuse_parallel_linears", "one GEMM over concatenated weights for projections of the same input (QKV, gate|up)",
         fuse_parallel_linears},
        {"dce", "remove nodes and weights nothing reads", eliminate_dead_code},
    };
    return passes;
}

const Pass *find_pass(const std::string &name)
{
    for (const auto &p : default_pipeline())
        if (name == p.name) return &p;
    return nullptr;
}

std::vector<std::string> run_pipeline(Program &prog, const PipelineOptions &opts)
{
    std::vector<std::string> known;
    for (const auto &p : default_pipeline()) known.push_back(p.name);
    for (const auto &d : opts.disabled)
        if (!find_pass(d)) throw Error(ErrorKind::Usage, "unknown pass '" + d + "'; passes: " + join(known, ", "));
    if (!opts.dump_after.empty() && !find_pass(opts.dump_after))
        throw Error(ErrorKind::Usage, "unknown pass '" + opts.dump_after + "'; passes: " + join(known, ", "));

    std::vector<std::string> ran;
    for (const auto &pass : default_pipeline()) {
        if (opts.disabled.count(pass.name)) continue;
        for (int s = 0; s < 3; s++) {
            pass.run(prog.section(s));
            prog.section(s).verify(std::string("after pass ") + pass.name + ", " + Program::section_name(s));
        }
        ran.push_back(pass.name);
        if (opts.dump && opts.dump_after == pass.name) {
            *opts.dump << "; IR after " << pass.name << "\n";
            print_program(prog, *opts.dump);
        }
    }
    return ran;
}

}  // namespace ckc
