// Prints the golden values in tests/rng.rs. Built with: g++ -O1 (g++ 12.2, libstdc++).
#include <random>
#include <cstdio>
#include <vector>
int main() {
    { std::mt19937 r; for (int i = 0; i < 9999; i++) r(); printf("default_10000th %u\n", (unsigned) r()); }
    { std::mt19937 r(0); printf("seed0:"); for (int i = 0; i < 5; i++) printf(" %u", (unsigned) r()); printf("\n"); }
    { std::mt19937 r(42); std::uniform_real_distribution<double> d(0.0f, 1.0f); printf("double42:"); for (int i = 0; i < 5; i++) printf(" %.17g", d(r)); printf("\n"); }
    { std::mt19937 r(42); std::uniform_real_distribution<float> d(0.0f, 1.0f); printf("float42:"); for (int i = 0; i < 5; i++) printf(" %.9g", (double) d(r)); printf("\n"); }
    { std::mt19937 r(1234); std::vector<float> p = {0.1f, 0.2f, 0.3f, 0.4f}; std::discrete_distribution<int> d(p.begin(), p.end()); printf("discrete1234:"); for (int i = 0; i < 20; i++) printf(" %d", d(r)); printf("\n"); }
    { std::mt19937 r(7); std::vector<float> p = {0.5f, 0.25f, 0.125f, 0.0625f, 0.0625f}; std::discrete_distribution<int> d(p.begin(), p.end()); printf("discrete7:"); for (int i = 0; i < 20; i++) printf(" %d", d(r)); printf("\n"); }
}
