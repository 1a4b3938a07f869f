// Linked into the Vulkan test programs under the sanitizers only: dlclose does nothing, so no library is unmapped
// before the process ends. The Vulkan loader unloads its drivers when an instance goes (and Qt its plugins at exit);
// memory a driver keeps in its globals then shows as leaked from an "<unknown module>", which LeakSanitizer can
// neither attribute nor suppress. Kept mapped, that memory stays reachable and only real leaks are reported. The
// executable exports this symbol (--export-dynamic-symbol=dlclose), so libraries opened later bind to it.
extern "C" int dlclose(void*) { return 0; }
