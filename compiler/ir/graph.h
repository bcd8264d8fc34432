// graph.h — the one IR of ckc.
//
// Graph: node-centric, single-output nodes, tensors connected by name.
// Inputs and weights are tensors with no producer. Nodes are kept in a valid
// execution (topological) order; mutation goes through methods that keep the
// producer/consumer index current, and passes stay outside this class.
//
// Program: three graphs run in sequence, the seeds' header / block / footer.
// The block is one decoder layer, run n_layers times; its weights are named
// with a "{L}" layer placeholder, so the generated code does not grow with
// depth. The residual stream (the "carry") flows header -> block x L ->
// footer through one buffer outside the activation arena.
//
// Shapes may contain the symbolic token count T (kTokens): every LLM
// activation is [T, ...], so the planner can work in bytes per token and the
// plan holds for any prompt length.
#pragma once

#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <utility>
#include <vector>

#include "ir/ops.h"

namespace ckc {

using Shape = std::vector<int64_t>;
constexpr int64_t kTokens = -1;  // the symbolic dimension T (tokens in this call)

enum class DType { F32, F16, BF16, I32, I64, Bool };
const char *dtype_name(DType t);
int64_t dtype_size(DType t);
DType dtype_from_name(const std::string &name);  // "f32", "i64", "bool", ...; throws naming it

// Where a tensor's memory lives.
enum class Storage {
    Activation,  // planned into the activation arena
    Weight,      // read-only, loaded from the checkpoint by name
    Input,       // read-only, provided by the caller (token ids)
    Carry,       // the residual stream buffer shared by header, block and footer
    Output,      // a caller-visible result buffer (logits)
};
const char *storage_name(Storage s);

// The checkpoint tensors a weight is made of; several parts are concatenated
// along dim 0 (fused QKV, gate|up). Names use "{L}" for the layer index.
// `transposed`: the single part is stored [in, out] in the file (GPT-2's
// Conv1D) and is transposed at load; part_shapes are as in the file.
struct WeightSource {
    std::vector<std::string> parts;
    std::vector<Shape> part_shapes;
    bool transposed = false;
};

struct Tensor {
    std::string name;
    Shape shape;
    DType dtype = DType::F32;
    Storage storage = Storage::Activation;
    WeightSource source;  // Storage::Weight only
    // Where a reference implementation computes exactly these values, if it does: the Hugging Face module
    // whose forward output this is ("model.layers.{L}.mlp.down_proj"), or the exported graph node. Passes
    // keep a tensor name's meaning (a fused node writes the tensor of the node it replaces), so the
    // reference survives them; traces (ck_trace.h) report it and the parity tests compare by it.
    std::string reference;
    // Storage::Output only: the graph input whose buffer this output is written into (graph.json "into": an
    // input the graph updates in place, like an optimizer's parameters); the planner writes it there once
    // nothing reads the input any more, or copies it there at the end.
    std::string into;
    // What each dimension's size is, where a front end said: the name model.c gives it ("CK_Q_DIM", one of
    // ModelInfo::sizes), "" where nothing did (empty: no dimension named). Set on weights and inputs by the
    // front end, carried to node outputs by their op's rule (OpDef::dims); codegen prints sizes by these
    // names, so a size at a call site is named by what it is, never by a value that happens to match.
    std::vector<std::string> dims;
    const std::string &dim(size_t axis) const;  // "" when unnamed
};

// A node attribute whose value differs by layer (Gemma-2's alternating
// sliding window): it names a per-layer table of the Program
// (Program::layer_tables), which the generated code indexes with `layer`.
// Printed as @name.
struct LayerTableRef {
    std::string table;
    bool operator==(const LayerTableRef &o) const { return table == o.table; }
};

using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, LayerTableRef>;

// Where a node came from, for the comments of the generated C, error messages and traces.
struct Origin {
    std::string module;  // the source module: an HF module path ("model.layers.{L}.mlp.down_proj") or an
                         // exported nn.Module path ("encoder.layers.{L}.linear1")
    std::string source;  // within it: the exported node's source, or what a pass or front end made
    bool empty() const { return module.empty() && source.empty(); }
    std::string str() const;  // "module: source", or whichever is set
};

// A constant's value for compile-time work (constant folding, pre-transposed
// weights): every dtype held as double (exact for f32, bool and |i| < 2^53).
struct ConstData {
    DType dtype = DType::F32;
    Shape shape;
    std::vector<double> v;
    int64_t numel() const;
};

struct Node {
    std::string name;  // unique in the graph
    Op op;
    std::vector<std::string> inputs;
    std::string output;
    std::map<std::string, Attr> attrs;
    Origin origin;

    bool has(const std::string &key) const { return attrs.count(key) != 0; }
    int64_t i(const std::string &key) const;
    double f(const std::string &key) const;
    const std::string &s(const std::string &key) const;
    const std::vector<int64_t> &ints(const std::string &key) const;
    int64_t i(const std::string &key, int64_t dflt) const { return has(key) ? i(key) : dflt; }
    double f(const std::string &key, double dflt) const { return has(key) ? f(key) : dflt; }
    // The per-layer table's name when the attribute is one (LayerTableRef), else "".
    std::string table(const std::string &key) const;
};

// The nodes of a Graph in execution order: iterated as `const Node &`, with size(), front() and back().
// at(i) walks from the front (O(i): for tests and small graphs).
class NodeList {
    struct Slot;

public:
    class iterator {
    public:
        using iterator_category = std::bidirectional_iterator_tag;
        using value_type = Node;
        using difference_type = std::ptrdiff_t;
        using pointer = const Node *;
        using reference = const Node &;
        iterator() = default;
        reference operator*() const;
        pointer operator->() const { return &**this; }
        iterator &operator++()
        {
            ++it_;
            return *this;
        }
        iterator operator++(int)
        {
            iterator t = *this;
            ++it_;
            return t;
        }
        iterator &operator--()
        {
            --it_;
            return *this;
        }
        bool operator==(const iterator &o) const { return it_ == o.it_; }
        bool operator!=(const iterator &o) const { return it_ != o.it_; }

    private:
        friend class NodeList;
        explicit iterator(std::list<Slot>::const_iterator it) : it_(it) {}
        std::list<Slot>::const_iterator it_;
    };
    iterator begin() const { return iterator(slots_.begin()); }
    iterator end() const { return iterator(slots_.end()); }
    size_t size() const { return slots_.size(); }
    bool empty() const { return slots_.empty(); }
    const Node &front() const { return *begin(); }
    const Node &back() const { return *std::prev(end()); }
    const Node &at(size_t i) const { return *std::next(begin(), static_cast<std::ptrdiff_t>(i)); }
    // (no operator[]: a loop over positions would walk the list each time; take a vector of pointers
    // with Graph::node_list() instead)

private:
    friend class Graph;
    struct Slot {
        Node node;
        int64_t key = 0;  // increases along the list: which of two nodes runs first, without a position
    };
    std::list<Slot> slots_;  // a list: a node stays where it is while others come and go
};

inline const Node &NodeList::iterator::operator*() const { return it_->node; }

class Graph {
public:
    Graph() = default;
    Graph(const Graph &o);
    Graph &operator=(const Graph &o);
    Graph(Graph &&) = default;
    Graph &operator=(Graph &&) = default;

    // ---- construction
    Tensor &add_tensor(Tensor t);  // throws if the name exists
    // Appends a node; its inputs must exist. Infers and registers the output
    // tensor (shape from the op's shape rule) unless it already exists.
    Node &add_node(Node n, Storage out_storage = Storage::Activation);
    void mark_output(const std::string &tensor);  // keeps it alive past the last node

    // ---- queries (every one in O(log n) or better, but node_index: see there)
    bool has_tensor(const std::string &name) const { return tensors_.count(name) != 0; }
    const Tensor &tensor(const std::string &name) const;
    Tensor &tensor(const std::string &name);
    const std::map<std::string, Tensor> &tensors() const { return tensors_; }
    const NodeList &nodes() const { return nodes_; }
    std::vector<const Node *> node_list() const;  // the nodes in order, indexable
    const std::vector<std::string> &outputs() const { return outputs_; }
    bool is_output(const std::string &tensor) const { return output_set_.count(tensor) != 0; }
    // Whether an output is written into this input's buffer (Tensor::into).
    bool updated_input(const std::string &input) const;
    const Node *producer(const std::string &tensor) const;  // nullptr for inputs/weights
    std::vector<const Node *> consumers(const std::string &tensor) const;  // in execution order
    const Node *node(const std::string &name) const;
    // The position of a node in execution order (-1 if absent). Positions are recomputed in one pass after an
    // edit: a pass should order nodes with runs_before() and place them with insert_node / insert_after.
    int node_index(const std::string &name) const;
    bool runs_before(const std::string &a, const std::string &b) const;  // both nodes
    std::string next_node(const std::string &name) const;                 // "" for the last

    // ---- mutation (passes)
    void replace_uses(const std::string &old_tensor, const std::string &new_tensor);
    void set_input(const std::string &node, size_t index, const std::string &tensor);
    // The node to change attributes of (not its inputs / output: use the methods above).
    Node &edit(const std::string &node);
    // Inserts before the node `before` (or appends when empty).
    Node &insert_node(Node n, const std::string &before, Storage out_storage = Storage::Activation);
    Node &insert_after(Node n, const std::string &after, Storage out_storage = Storage::Activation);
    void remove_node(const std::string &name);
    void remove_tensor(const std::string &name);  // must have no producer/consumers

    // Tensors that are neither produced nor consumed nor outputs (dead weights).
    std::vector<std::string> unused_tensors() const;
    std::string unique_name(const std::string &base) const;

    // Re-derives shapes of all node outputs and checks every invariant:
    // inputs exist, single producer, order is topological, op arity and
    // shape rules hold. Throws Error(Internal) naming the node.
    void verify(const std::string &where) const;

private:
    using SlotIt = std::list<NodeList::Slot>::iterator;
    SlotIt slot(const std::string &node, const char *what) const;
    Node &place(Node n, SlotIt at, Storage out_storage);
    void index_node(NodeList::Slot &s);
    void unindex_node(NodeList::Slot &s);
    void rebuild_index();
    void relabel();

    NodeList nodes_;
    std::map<std::string, Tensor> tensors_;
    std::vector<std::string> outputs_;
    std::unordered_set<std::string> output_set_;
    // kept current by every edit
    std::unordered_map<std::string, SlotIt> by_name_;
    std::unordered_map<std::string, NodeList::Slot *> producer_;
    std::unordered_map<std::string, std::vector<NodeList::Slot *>> consumers_;  // each reading node once
    mutable std::unordered_map<std::string, int> next_suffix_;                   // unique_name's next try
    // node_index's positions, recomputed on demand after an edit
    mutable bool positions_dirty_ = true;
    mutable std::unordered_map<const NodeList::Slot *, int> positions_;
};

// Which front end made a Program: a language model from a Hugging Face config.json (token ids in,
// logits out, the ck_model ABI) or an exported graph.json (static shapes, the ck_graph ABI).
enum class ModelKind { Llm, Graph };

// A model description shared by all front ends.
struct ModelInfo {
    ModelKind kind = ModelKind::Llm;
    std::string family;        // "llama", ...
    std::string optional_prefix;  // checkpoint names may lack it ("model.", "transformer.")
    std::string source_path;   // the config.json compiled
    uint64_t source_hash = 0;  // fnv1a64 of its bytes
    int64_t vocab_size = 0, hidden_size = 0, n_layers = 0, context_length = 0;
    std::string summary;       // one human line (heads, dims...)
    std::vector<std::string> notes;  // worth telling the user (printed by the CLI), e.g. a defaulted vocab_size
    // The named sizes of the generated C (#define CK_FFN 172 /* MLP width */), what Tensor::dims and the size
    // attributes of nodes (`attr`: a node attribute "heads" of this value prints as CK_HEADS) refer to.
    struct NamedSize {
        std::string name;  // "CK_FFN"
        int64_t value = 0;
        std::string doc;   // "MLP width"
        std::string attr;  // the node attribute it names ("heads", "head_dim"), "" for widths
        std::vector<std::string> parts;  // a fused width: the sizes it concatenates (fuse_parallel_linears)
    };
    std::vector<NamedSize> sizes;
    const NamedSize *size_named(const std::string &name) const;  // nullptr if none
    // The C name of node attribute `attr` when it equals `value` ("heads", 8 -> "CK_HEADS"), else "".
    std::string size_for_attr(const std::string &attr, int64_t value) const;
    // How the weight matrices are kept (ckc compile --weights, or a GGUF input): false = float32 (converted
    // at load); true = the matrices GEMMs and embedding lookups read stay in a stored format (ck_quant.h):
    // `weight_type` (a ck_qtype) or, with -1, each tensor's own type in the file.
    bool stored_weights = false;
    int weight_type = -1;
    // A GGUF input: the metadata values the model was compiled from (what the tensors' shapes do not show: heads,
    // eps, RoPE base...), which ck_model_init checks in the file it loads (ck_checkpoint_check_gguf).
    struct HeaderValue {
        std::string key;
        enum Kind { Int, Number, String } kind = Int;
        int64_t i = 0;
        double number = 0;
        std::string str;
    };
    std::vector<HeaderValue> gguf_header;
    // A config.json input: the values of the keys that decide the numbers (heads, eps, RoPE base, activation...,
    // those the file has), which ck_model_init checks in a config.json beside the safetensors it loads
    // (ck_checkpoint_check_config); config_hash is fnv1a64 over them, in the frontmatter.
    std::vector<HeaderValue> config_expect;
    uint64_t config_hash = 0;
};

// Values of one attribute across layers (index = layer).
struct LayerTable {
    bool is_int = true;
    std::vector<double> values;
};

// The sections of a Program, in the order they run: header once, a block once per layer, footer once. A model
// whose layers are of two kinds (a mixture of experts with dense layers between its sparse ones: Qwen3-MoE's
// decoder_sparse_step and mlp_only_layers) has a second block, Block2, run for the layers Program::layer_kind
// marks 1; every other program leaves it empty.
enum class Section { Header, Block, Block2, Footer };
constexpr Section kSections[] = {Section::Header, Section::Block, Section::Block2, Section::Footer};
constexpr size_t kNumSections = 4;
constexpr bool is_layer_section(Section s) { return s == Section::Block || s == Section::Block2; }

struct Program {
    ModelInfo info;
    Graph header, block, block2, footer;
    // Which block each layer runs: 0 `block`, 1 `block2`. Empty: every layer runs `block` (block2 is empty).
    std::vector<int> layer_kind;
    std::string carry;  // name of the residual-stream tensor, e.g. "x"
    Shape carry_shape;
    std::vector<std::string> carry_dims;  // its Tensor::dims
    std::map<std::string, LayerTable> layer_tables;  // referenced by block attrs (LayerTableRef)
    // Graph programs: the values of constant tensors, by tensor source name
    // (the exported weights, and what constant folding produced).
    std::map<std::string, ConstData> constants;
    // Graph programs: the exported weights file constants not yet in
    // `constants` are read from (ir/constants.h).
    std::string weights_path;
    // Graph programs: caller inputs and outputs (tensor names) in export
    // order, and the outputs' names as the exported module returned them.
    std::vector<std::string> inputs, outputs, output_names;
    // Graph programs: the symbolic sizes (ir/symbolic.h) their inputs' shapes bind, in the order the generated
    // code keeps their values (ck_graph.h: ck_graph_symbol_name); empty for a graph of static shapes.
    std::vector<std::string> symbols;

    Graph &section(Section s)
    {
        return s == Section::Header ? header : s == Section::Block ? block : s == Section::Block2 ? block2 : footer;
    }
    const Graph &section(Section s) const { return const_cast<Program *>(this)->section(s); }
    static const char *section_name(Section s)
    {
        return s == Section::Header ? "header" : s == Section::Block ? "block" : s == Section::Block2 ? "block2" : "footer";
    }
    // The sections this program has, in the order they run (Block2 only with layers of two kinds).
    std::vector<Section> sections() const;
    bool has_block2() const { return !layer_kind.empty(); }
    // How many times a section runs per pass: 1 for header and footer, the layers of its kind for a block.
    int64_t runs_of(Section s) const;
    // Whether layer `layer` runs section s (a block).
    bool layer_runs(int64_t layer, Section s) const;
};

// How a node's output could alias its input 0 (its op's view rule): what the planner may make of it.
std::optional<ViewOf> potential_view(const Graph &g, const Node &n);

std::string shape_str(const Shape &s);          // "[T, 64]"
int64_t shape_numel_fixed(const Shape &s);      // product of the non-T dims, symbolic sizes at their bounds
int64_t shape_numel(const Shape &s);            // the product as a (symbolic) size; not for T shapes
bool shape_has_tokens(const Shape &s);
bool shape_is_static(const Shape &s);           // no T, no symbolic size (ir/symbolic.h)

// The weights of a program, each checkpoint tensor once (a tied embedding read by header and footer counts once;
// a layer's tensor once per layer that reads it): elements (symbolic sizes at their bounds) and bytes as stored.
struct WeightTotals {
    int64_t elements = 0;
    double bytes = 0;
};
WeightTotals weight_totals(const Program &p);

}  // namespace ckc
