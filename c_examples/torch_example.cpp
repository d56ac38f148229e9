// A LibTorch trainer fed by MDLoader: data-parallel SGD over MPI.
//
// Every rank holds a shard of a synthetic regression dataset in MDLoader. Each epoch
// draws one global shuffle (the same permutation on every rank); at each step every rank
// fetches its own mini-batch of global ids from wherever they live, wraps the fetched
// bytes in a torch::Tensor with torch::from_blob (no copy), runs forward and backward,
// averages the gradients over the ranks with MPI_Allreduce and takes an SGD step, so
// every rank keeps an identical model. Rank 0 prints the mean training loss per epoch.
//
// A sample is a fixed-size record of floats: kFeatures inputs, then the target.
//
//   mpirun -n 4 ./torch_example [--epochs 5] [--batch 32] [--samples 16384] [--lr 0.05]
//
// Exit status: 0 when every fetched record was right and the loss went down.
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdloader.h"

namespace {

constexpr int64_t kFeatures = 16;
constexpr int64_t kRecord = kFeatures + 1;  // floats per sample: x[0..15], y
constexpr uint64_t kRecordBytes = kRecord * sizeof(float);

// Turns a failed MDLoader call into an exception that carries the library's message.
void check(mdl_status st, const char *what) {
    if (st == MDL_OK) return;
    char msg[512] = "";
    mdl_last_error(msg, sizeof msg);
    throw std::runtime_error(std::string(what) + ": " + mdl_status_string(st) + ": " + msg);
}

// ---- the dataset: record g is a pure function of g, so any rank can check any record ----

uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

float uniform(uint64_t g, uint64_t j) {  // in [-1, 1)
    return static_cast<float>(static_cast<double>(mix64(g * 64 + j) >> 11) * 0x1.0p-52 - 1.0);
}

// y = w . x / 2 + 0.3 sin(3 x0) + a little noise: mostly linear, a bit of curvature.
void make_record(uint64_t g, float *rec) {
    float y = 0.0f;
    for (int64_t j = 0; j < kFeatures; j++) {
        rec[j] = uniform(g, j);
        float w = static_cast<float>(j % 5) / 2.0f - 1.0f;  // -1, -0.5, 0, 0.5, 1
        y += w * rec[j];
    }
    rec[kFeatures] = 0.5f * y + 0.3f * std::sin(3.0f * rec[0]) + 0.01f * uniform(g, 63);
}

struct Options {
    int epochs = 5;
    int64_t batch = 32;  // per rank
    uint64_t samples = 16384;
    double lr = 0.05;
};

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        const char *v = argv[i + 1];
        if (a == "--epochs") o.epochs = std::atoi(v);
        else if (a == "--batch") o.batch = std::atoll(v);
        else if (a == "--samples") o.samples = std::strtoull(v, nullptr, 10);
        else if (a == "--lr") o.lr = std::atof(v);
        else throw std::runtime_error("unknown option " + a);
    }
    if (argc % 2 == 0) throw std::runtime_error(std::string("missing value for ") + argv[argc - 1]);
    if (o.epochs < 1 || o.batch < 1 || o.samples < 1 || !(o.lr > 0))
        throw std::runtime_error("options must be positive");
    return o;
}

// Data parallelism by hand: the mean of every gradient over the ranks.
void average_gradients(torch::nn::Module &model, MPI_Comm comm, int nranks) {
    for (auto &p : model.parameters()) {
        auto g = p.grad();  // dense, contiguous float32 on the CPU
        MPI_Allreduce(MPI_IN_PLACE, g.data_ptr<float>(), static_cast<int>(g.numel()), MPI_FLOAT,
                      MPI_SUM, comm);
        g.div_(nranks);
    }
}

int train(int rank, int nranks, const Options &opt) {
    // ---- register this rank's block of the dataset ----
    uint64_t per = opt.samples / nranks, extra = opt.samples % nranks;
    uint64_t n_local = per + (static_cast<uint64_t>(rank) < extra);
    uint64_t first = rank * per + std::min<uint64_t>(rank, extra);
    std::vector<float> shard(n_local * kRecord);
    std::vector<uint64_t> offsets(n_local + 1);
    for (uint64_t i = 0; i < n_local; i++) {
        make_record(first + i, &shard[i * kRecord]);
        offsets[i] = i * kRecordBytes;
    }
    offsets[n_local] = n_local * kRecordBytes;

    mdl_loader *loader = nullptr;
    check(mdl_init(MPI_COMM_WORLD, &loader), "mdl_init");
    check(mdl_register_shard(loader, shard.data(), offsets.data(), n_local), "mdl_register_shard");
    shard = {};  // MDLoader has its own copy
    uint64_t total = 0;
    check(mdl_num_samples(loader, &total), "mdl_num_samples");

    // ---- the model: the same initial weights on every rank ----
    torch::manual_seed(42);
    torch::nn::Sequential model(torch::nn::Linear(kFeatures, 32), torch::nn::ReLU(),
                                torch::nn::Linear(32, 1));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(opt.lr).momentum(0.9));

    const int64_t B = opt.batch;
    const uint64_t steps = total / (static_cast<uint64_t>(nranks) * B);  // drop the remainder
    if (steps == 0) throw std::runtime_error("fewer samples than ranks x batch");
    if (rank == 0)
        std::printf("%d ranks, %llu samples of %llu bytes, batch %lld per rank, %llu steps per epoch\n",
                    nranks, (unsigned long long)total, (unsigned long long)kRecordBytes, (long long)B,
                    (unsigned long long)steps);

    std::vector<uint64_t> perm(total), batch_offsets(B + 1);
    std::vector<float> batch(B * kRecord), expected(kRecord);
    long wrong = 0;
    double first_loss = 0, last_loss = 0;

    for (int epoch = 0; epoch < opt.epochs; epoch++) {
        auto t0 = std::chrono::steady_clock::now();
        // One global shuffle per epoch, identical on every rank (same seed, same code).
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937_64(1000 + epoch));
        double loss_sum = 0;

        for (uint64_t s = 0; s < steps; s++) {
            const uint64_t *ids = &perm[(s * nranks + rank) * B];  // this rank's slice
            check(mdl_fetch_batch(loader, ids, B, batch.data(), batch.size() * sizeof(float),
                                  batch_offsets.data()),
                  "mdl_fetch_batch");
            for (int64_t k = 0; k < B; k++) {  // cheap: check every record
                make_record(ids[k], expected.data());
                wrong += batch_offsets[k] != k * kRecordBytes ||
                         std::memcmp(&batch[k * kRecord], expected.data(), kRecordBytes) != 0;
            }

            // The fetched bytes become a tensor in place: [B, kFeatures + 1] floats.
            torch::Tensor records = torch::from_blob(batch.data(), {B, kRecord}, torch::kFloat32);
            torch::Tensor x = records.narrow(1, 0, kFeatures);
            torch::Tensor y = records.narrow(1, kFeatures, 1);

            sgd.zero_grad();
            torch::Tensor loss = torch::mse_loss(model->forward(x), y);
            loss.backward();
            average_gradients(*model, MPI_COMM_WORLD, nranks);
            sgd.step();
            loss_sum += loss.item<double>();
        }

        double mean = 0;
        MPI_Allreduce(&loss_sum, &mean, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        mean /= static_cast<double>(steps) * nranks;
        if (epoch == 0) first_loss = mean;
        last_loss = mean;
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rank == 0) std::printf("epoch %d: loss %.5f (%.2f s)\n", epoch + 1, mean, secs);
    }
    check(mdl_finalize(&loader), "mdl_finalize");

    long wrong_all = 0;
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    bool learned = opt.epochs == 1 || last_loss < 0.5 * first_loss;
    if (rank == 0) {
        std::printf("records: %s; loss %.5f -> %.5f%s\n",
                    wrong_all ? "SOME WRONG" : "every byte correct", first_loss, last_loss,
                    learned ? "" : " (did not go down enough)");
    }
    return wrong_all == 0 && learned ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    // One intra-op thread per rank: ranks already fill the cores, and oversubscribed
    // threads would slow every rank down.
    torch::set_num_threads(1);

    int rc;
    try {
        rc = train(rank, nranks, parse(argc, argv));
    } catch (const std::exception &e) {
        // MDLoader makes every rank fail a collective call together, so aborting here
        // does not cut anyone off mid-collective; it ends the job quickly and loudly.
        std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    MPI_Finalize();
    return rc;
}
