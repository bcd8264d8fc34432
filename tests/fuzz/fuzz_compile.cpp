// libFuzzer target: `ckc compile` on a hostile input, the whole compiler: frontend, passes, planner and code
// generation, as compiler/main.cpp runs them. Built three times (CKC_FUZZ_INPUT):
//   0  config.json  (the first byte: bit 0 --train, bit 1 --weights q8_0, bit 2 --max-context 64; the rest is the
//                    file)
//   1  graph.json   (beside a weights.safetensors holding f32 tensors "w" [4, 4], "b" [4], "0.weight" [8, 8] and
//                    "0.bias" [8], which constants may name)
//   2  model.gguf
// A ckc::Error of the input, usage or I/O kinds is the expected refusal; an internal error, any other exception,
// a crash, a sanitizer report or a leak is a finding. Seeds: tests/fuzz/seeds/{config,graph,gguf}.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "ck_quant.h"
#include "codegen/graph_codegen.h"
#include "codegen/llm_codegen.h"
#include "frontend/gguf/gguf_frontend.h"
#include "frontend/graph/graph_json.h"
#include "frontend/hf/families.h"
#include "passes/pass.h"
#include "planner/planner.h"
#include "support/error.h"
#include "support/safetensors_writer.h"

#ifndef CKC_FUZZ_INPUT
#error "define CKC_FUZZ_INPUT: 0 config.json, 1 graph.json, 2 model.gguf"
#endif
#ifndef CKC_SOURCE_DIR
#error "define CKC_SOURCE_DIR"
#endif

namespace {

const char *const kNames[] = {"config.json", "graph.json", "model.gguf"};

std::string folder()
{
    static std::string dir;
    if (dir.empty()) {
        dir = "/tmp/ck-fuzz-compile" + std::to_string(CKC_FUZZ_INPUT) + "-" + std::to_string(getpid());
        mkdir(dir.c_str(), 0700);
        if (CKC_FUZZ_INPUT == 1) {
            std::vector<ckc::StTensor> ts;
            auto add = [&](const char *name, std::vector<int64_t> shape) {
                ckc::StTensor t;
                t.name = name;
                t.shape = shape;
                int64_t n = 1;
                for (auto d : shape) n *= d;
                t.data.assign(static_cast<size_t>(n) * 4, 0);
                for (size_t i = 0; i < t.data.size(); i += 4) t.data[i + 3] = 0x3f;  // 0.5f
                ts.push_back(t);
            };
            add("w", {4, 4});
            add("b", {4});
            add("0.weight", {8, 8});
            add("0.bias", {8});
            std::string bytes = ckc::safetensors_bytes(ts);
            FILE *f = std::fopen((dir + "/weights.safetensors").c_str(), "wb");
            if (f) {
                std::fwrite(bytes.data(), 1, bytes.size(), f);
                std::fclose(f);
            }
        }
    }
    return dir;
}

void compile(const std::string &path, uint8_t flags)
{
    using namespace ckc;
    Program p;
    bool train = false;
    if (CKC_FUZZ_INPUT == 1) {
        if (!is_graph_json(path)) return;
        p = build_from_graph_json(path);
    } else if (CKC_FUZZ_INPUT == 2) {
        if (!is_gguf(path)) return;
        p = build_from_gguf(path);
    } else {
        HfOptions hf;
        if (flags & 4) hf.max_context = 64;
        p = build_from_hf_config(path, hf);
        if (flags & 2) {
            p.info.stored_weights = true;
            p.info.weight_type = CK_Q_Q8_0;
        }
        train = (flags & 1) && !p.info.stored_weights;
    }
    PipelineOptions po;
    std::vector<std::string> passes = run_pipeline(p, po);
    PlanOptions plo;
    if (train) plo.keep_all = true, plo.inplace = false;
    Plan plan = plan_program(p, plo);
    CodegenOptions cg;
    cg.passes = passes;
    cg.runtime_dir = CKC_SOURCE_DIR "/runtime";
    cg.templates_dir = CKC_SOURCE_DIR "/templates";
    cg.train = train;
    if (p.info.kind == ModelKind::Graph)
        generate_graph_c(p, plan, cg);
    else
        generate_llm_c(p, plan, cg);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t flags = 0;
    if (CKC_FUZZ_INPUT == 0) {
        if (size < 1) return 0;
        flags = data[0];
        data++, size--;
    }
    std::string path = folder() + "/" + kNames[CKC_FUZZ_INPUT];
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        compile(path, flags);
    } catch (const ckc::Error &e) {
        if (e.kind() == ckc::ErrorKind::Internal) {
            std::fprintf(stderr, "fuzz_compile: internal error on a bad input: %s\n", e.what());
            std::abort();
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "fuzz_compile: an exception escaped (ckc would say \"internal error\"): %s\n", e.what());
        std::abort();
    }
    return 0;
}
